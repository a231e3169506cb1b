#!/usr/bin/env bash
# The main job on this host: build pinfold and run it with embedded defaults.
# For now that is `pinfold topology` (what the planner will register for this
# host); later issues grow it into `pinfold up` (planner + agent).
#
#   hack/run.sh [pinfold topology flags…]
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib.sh
ensure_go
go build -o bin/pinfold ./cmd/pinfold
exec bin/pinfold topology "$@"
