//! Cross-crate tests live in `tests/`: the Helm chart (`charts/ocm-placement`) rendered, linted
//! and installed with the real `helm` against the real apiserver.
