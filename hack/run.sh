#!/usr/bin/env bash
# The main job on this host: build pinfold and run it with embedded defaults:
# `pinfold up`, a planner with embedded etcd under ~/.local/share/pinfold and
# this host registered, and its node agent where the host has cgroup v2 and
# Docker (else `up` says which is missing and runs the planner alone).
# It prints the host's topology first. Stop it with Ctrl-C; state is kept.
#
#   hack/run.sh [pinfold up flags…]
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib.sh
ensure_go
go build -ldflags "$(vcs_ldflags)" -o bin/pinfold ./cmd/pinfold
bin/pinfold topology
exec bin/pinfold up "$@"
