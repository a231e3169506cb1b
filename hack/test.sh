#!/usr/bin/env bash
# Every test tier pinfold has, from a fresh clone: installs what it needs,
# then runs lint, the unit and fake-tree tiers (go test ./...), and short
# fuzzing of the parsers. A tier that is asked for and cannot run fails.
#
#   hack/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib.sh
ensure_go
go mod download
T0=$(date +%s)
echo "== lint"
hack/lint.sh
echo "== unit and fake-tree tiers"
go test -race -count=1 ./...
echo "== fuzz (short)"
go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 15s ./planner/cpuset
go test -run '^$' -fuzz '^FuzzDiscoverFiles$' -fuzztime 15s ./numa
go test -run '^$' -fuzz '^FuzzDecodeFile$' -fuzztime 15s ./planner/alloc
echo "== benchmarks run once (figures in docs/BENCHMARKS.md; no timing is asserted)"
go test -run '^$' -bench . -benchtime 1x ./planner/...
echo "== all tiers passed in $(( $(date +%s) - T0 )) s"
