module ocm-placement/tests/csr-vectors

go 1.26
