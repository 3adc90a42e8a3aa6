#!/bin/sh
# Regenerates vectors.json: what Go's encoding/pem.Decode reads from each CSR framing.
# Needs Go only (stdlib, offline); the Rust tests read the checked-in file.
set -eu
cd "$(dirname "$0")"
go run . > vectors.json.tmp
mv vectors.json.tmp vectors.json
