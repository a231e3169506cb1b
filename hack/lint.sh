#!/usr/bin/env bash
# Mechanical checks of the layout rules in docs/ARCHITECTURE.md:
# gofmt, go vet (every build tag), and the import boundaries of the pure core.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib.sh
ensure_go
fail=0
unformatted=$(gofmt -l $(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "lint: gofmt would change:"; echo "$unformatted"; fail=1; fi
go vet ./... || fail=1
go vet -tags kernel,e2e,hostile ./... || fail=1
mod=github.com/pinfold/pinfold
# Pure packages: no I/O, no clock, no randomness, no logging, no edges.
for pkg in planner/clip planner/cpuset planner/topology planner/model planner/alloc planner/placement planner/balance planner/servicesfile planner/preempt; do
  [ -d "$pkg" ] || continue
  bad=$(go list -f '{{join .Imports "\n"}}' "./$pkg" | grep -E "^(os|os/exec|net|net/.*|log|log/slog|math/rand|math/rand/v2|syscall|$mod/(numa|cgroup|docker|nodeagent).*)$" || true)
  if [ -n "$bad" ]; then echo "lint: pure package $pkg imports: $bad"; fail=1; fi
  if grep -n 'time\.Now\|time\.Since' "$pkg"/*.go 2>/dev/null | grep -v _test.go; then
    echo "lint: pure package $pkg reads the clock"; fail=1
  fi
done
# Nothing under planner/ reaches out to the host-side packages.
bad=$(go list -deps ./planner/... | grep -E "^$mod/(numa|cgroup|docker|nodeagent)" || true)
if [ -n "$bad" ]; then echo "lint: planner/ depends on host-side packages: $bad"; fail=1; fi
# The agent side never reaches into the planner's server: the wire types
# and the link's framing are leaves (planner/wire, planner/agentlink).
bad=$(go list -deps ./nodeagent/... ./planner/agentlink | grep -E "^$mod/planner/api(/|$)" || true)
if [ -n "$bad" ]; then echo "lint: nodeagent or planner/agentlink depends on the planner's API server: $bad"; fail=1; fi
# Only planner/state speaks to etcd (the embed wiring included).
bad=$(go list -f '{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}}' ./... | grep 'go\.etcd\.io/' | awk '{print $1}' | grep -vx "$mod/planner/state" || true)
if [ -n "$bad" ]; then echo "lint: only planner/state may import go.etcd.io/...; also: $bad"; fail=1; fi
# The domain model is a leaf: the CPU-set type and the standard library.
bad=$(go list -f '{{join .Imports "\n"}}' ./planner/model | grep "^$mod/" | grep -vx "$mod/planner/cpuset" || true)
if [ -n "$bad" ]; then echo "lint: planner/model imports $bad"; fail=1; fi
# numa touches os only in host_linux.go.
if grep -ln '"os"' numa/*.go | grep -v -e _test.go -e host_linux.go; then echo "lint: numa imports os outside host_linux.go"; fail=1; fi
[ $fail = 0 ] && echo "lint: ok"
exit $fail
