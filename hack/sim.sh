#!/usr/bin/env bash
# The control plane's seeded simulation (planner/sim; docs/TESTING.md):
# the real service and store over embedded etcd, simulated agents and a
# simulated clock, random operations, invariants checked after every step.
#
#   hack/sim.sh --seed S [--steps N]     one seed (default 10000 steps)
#   hack/sim.sh --seeds A-B [--steps N]  seeds A to B, one after another
#   hack/sim.sh --ci                     the CI budget: seeds 1-8 in about
#                                        2 minutes all together
#   --verify-every K   the full audit every K steps (default 1)
#   --budget D         end each seed at its share of D (Go duration, e.g. 30m)
#   -v                 print every operation and refusal
#
# A failed seed prints its step, the operations before it and the replay
# command; a seed that found a defect goes into the regressions table in
# planner/sim/sim_test.go.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib.sh
seeds=1 steps=10000 budget=0 verify=1 v=false
while (($#)); do
  case $1 in
    --seed|--seeds) [ $# -ge 2 ] || { echo "hack/sim.sh: $1 needs a value" >&2; exit 2; }
      [[ $2 =~ ^[0-9]+(-[0-9]+)?$ ]] || { echo "hack/sim.sh: $1 = $2: want N or A-B" >&2; exit 2; }
      seeds=$2; shift 2;;
    --steps) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "hack/sim.sh: --steps = ${2:-}: want a positive number" >&2; exit 2; }
      steps=$2; shift 2;;
    --budget) [ $# -ge 2 ] || { echo "hack/sim.sh: --budget needs a duration (e.g. 30m)" >&2; exit 2; }
      budget=$2; shift 2;;
    --verify-every) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "hack/sim.sh: --verify-every = ${2:-}: want a positive number" >&2; exit 2; }
      verify=$2; shift 2;;
    --ci) seeds=1-8 steps=1000000 budget=110s; shift;;
    -v) v=true; shift;;
    *) echo "hack/sim.sh: unknown argument $1 (want --seed S, --seeds A-B, --steps N, --budget D, --verify-every K, --ci, -v)" >&2; exit 2;;
  esac
done
ensure_go
exec go test -count=1 -timeout 0 -v -run '^TestSimulation$' ./planner/sim/ \
  -sim.seeds "$seeds" -sim.steps "$steps" -sim.budget "$budget" -sim.verify-every "$verify" -sim.v="$v"
