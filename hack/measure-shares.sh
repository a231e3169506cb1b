#!/usr/bin/env bash
# Measure how a shared fragment CPU is split between a 1.7 and a 1.3 CPU
# instance under each fragment scheme, in the QEMU guest (planner + agent +
# dockerd, busy loops on every thread). Prints the figures; slow under TCG.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib.sh
ensure_go
hack/vm/build >/dev/null
CGO_ENABLED=0 go build -o bin/pinfold ./cmd/pinfold
PINFOLD_VM_CPUS_PER_NODE=3,2 PINFOLD_VM_ENV="PINFOLD_BIN=$PWD/bin/pinfold" CGO_ENABLED=0 \
  go test -count=1 -v -tags e2e -run '^TestMeasureFragmentShares$' -timeout 30m \
  -exec "$PWD/hack/vm/run --docker --timeout 1500" ./test/e2e/ 2>&1 | grep -E 'scheme|^(---|ok|FAIL)'
