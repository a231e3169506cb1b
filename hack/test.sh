#!/usr/bin/env bash
# Every test tier pinfold has, from a fresh clone: installs what it needs,
# then runs lint, the unit and fake-tree tiers (go test ./...), the hostile
# tier (a planner over mutual TLS under issue 26's attacks), the web view
# in headless Chromium, the .deb package's contents, short fuzzing of the
# parsers, the benchmarks once, and the kernel and e2e tiers in the QEMU
# guest (hack/vm: 2 NUMA nodes, cgroup v2, dockerd). A tier that is asked for and
# cannot run fails; it never skips.
#
#   hack/test.sh                    every tier
#   hack/test.sh --native-kernel    only the kernel tier, natively on this
#                                   host (root, cgroup v2): hack/native-kernel.sh
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  --native-kernel) exec hack/native-kernel.sh;;
  "") ;;
  *) echo "hack/test.sh: unknown argument $1 (want none, or --native-kernel)" >&2; exit 2;;
esac
. hack/lib.sh
ensure_go
go mod download
T0=$(date +%s)
echo "== lint"
hack/lint.sh
echo "== unit and fake-tree tiers"
go test -race -count=1 ./...
# The kernel model's tests, pure computation in one goroutine, skip under
# -race (it slows them past 10 minutes and finds nothing there): here.
go test -count=1 -run 'SharePlant' ./nodeagent/
echo "== simulation (the control plane's seeded simulation: seeds 1-8, about 2 minutes; docs/TESTING.md)"
hack/sim.sh --ci
echo "== hostile tier (issues 26 and 36: N1-N12, the per-identity bounds, R1, A1, E1, AG1, N7, names and the CRL, against a planner over mutual TLS; about 70 s)"
log=$(mktemp)
set +e
go test -count=1 -v -tags hostile -run '^TestHostile$' -timeout 5m ./cmd/pinfold/ 2>&1 | grep -v '^{"level"' | tee "$log" | grep -E '^(--- |    --- |ok|FAIL|panic)|_test\.go:'
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || { echo "hostile tier failed (exit $rc)"; exit 1; }
for st in N1_audit_log_flood N2_wide_registration N3_stalled_and_idle N4_scale_count N6_agent_version N7_env_values N8_no_role \
  N9_streams N10_event_with_its_change N11_refused_before_read N12_error_echo conns_per_identity idle_conns_per_identity rate_per_identity \
  R1_heavy_dry_runs A1_version_churn E1_reads_keep_the_audit AG1_agent_capacity N7_viewer_secrets names_like_instances CRL_deleted; do
  grep -q "^    --- PASS: TestHostile/$st " "$log" || { echo "hostile tier: TestHostile/$st did not pass: it must not skip"; exit 1; }
done
rm -f "$log"
echo "== UI tier (the planner's live web view in headless Chromium)"
apt_install chromium
go test -count=1 -tags ui -run '^TestUI' ./cmd/pinfold/
echo "== package (the .deb, its contents checked)"
pkgdir=$(mktemp -d)
deb=$(hack/package.sh "$pkgdir")
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/pinfold ./lib/systemd/system/pinfold-planner.service ./lib/systemd/system/pinfold-agent.service \
  ./etc/default/pinfold ./usr/share/man/man1/pinfold.1.gz ./usr/share/man/man1/pinfold-planner.1.gz \
  ./usr/share/man/man1/pinfold-agent.1.gz ./usr/share/doc/pinfold/copyright ./usr/lib/sysusers.d/pinfold.conf \
  ./usr/share/lintian/overrides/pinfold; do
  grep -q " $f\$" <<<"$contents" || { echo "package: $deb lacks $f"; echo "$contents"; exit 1; }
done
dpkg-deb -f "$deb" Package Version Architecture Depends
grep -q '^Type=notify' <(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/pinfold-planner.service) || { echo "package: the planner unit is not Type=notify"; exit 1; }
apt_install lintian
# Clean as built: statically-linked-binary is overridden, with the reason,
# in the package's own lintian override file (hack/package/pinfold.lintian-overrides).
lintian --fail-on error,warning "$deb"
# The units' hardening: both below 5 in systemd-analyze's exposure score.
apt_install systemd
for unit in pinfold-planner pinfold-agent; do
  dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/$unit.service > "$pkgdir/$unit.service"
  score=$(systemd-analyze security --offline=true --no-pager "$pkgdir/$unit.service" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  echo "systemd-analyze security $unit: $score"
  awk -v s="$score" 'BEGIN { exit !(s != "" && s < 5) }' || { echo "package: $unit.service exposure ${score:-unknown}, want below 5"; exit 1; }
done
rm -rf "$pkgdir"
echo "== fuzz (short)"
# Budgets are counts of inputs, not durations: a duration (-fuzztime 15s)
# races Go 1.26's fuzzing coordinator at its deadline and fails now and then
# with a bare "context deadline exceeded" and no failing input
# (go.dev/issue/75804, fixed in Go 1.27; it failed CI once on
# FuzzDecodeFile). Each count is about 15 s of this project's 2-core CI.
go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 1000000x ./planner/cpuset
go test -run '^$' -fuzz '^FuzzDiscoverFiles$' -fuzztime 400000x ./numa
go test -run '^$' -fuzz '^FuzzDecodeFile$' -fuzztime 350000x ./planner/planfile
go test -run '^$' -fuzz '^FuzzPieces$' -fuzztime 250000x ./planner/planfile
go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 400000x ./planner/placement
# Every API method through the real handler over a real store: no panic, no
# internal error, a refused request changes nothing.
go test -run '^$' -fuzz '^FuzzAPI$' -fuzztime 6000x ./planner/api 2>&1 | grep -v '^{"level"'; [ "${PIPESTATUS[0]}" = 0 ]
echo "== benchmarks run once (figures in docs/BENCHMARKS.md; no timing is asserted)"
go test -run '^$' -bench . -benchtime 1x ./planner/...
echo "== kernel tier (QEMU guest: 2 NUMA nodes, cgroup v2, Debian docker.io)"
hack/vm/build >/dev/null
kernel_pkgs=(./numa/ ./cgroup/ ./docker/ ./nodeagent/)
log=$(mktemp)
# summary LOG: each test message's first line and the FAIL lines, printed
# last, so a failure is readable from the tail of the output even when the
# daemons' logs that follow it are long.
summary() {
  echo "== summary of $2 (messages' first lines; daemon logs above)"
  { grep -E '^ {4}[A-Za-z0-9_]+_test\.go:[0-9]+: |^--- FAIL|^(FAIL|ok) ' "$1" | grep -v ' log:$' | tail -40; } || true
}
# -p 1: one guest at a time, so the cpu.max measurement has the host's CPUs.
# set +e around a tier: with -e and pipefail a failing tier would end the
# script here, before the summary that makes the failure readable.
set +e
# Timeouts, in order: Go's -timeout G inside the guest (a hang in a test
# ends in Go's dump of every goroutine), the guest's watchdog at T - 20 s
# (hack/vm/init: every task's kernel stack), the guest's own limit T
# (vm/run: "timed out"), and last the go command's kill of the guest at
# G + 60 s: G < T - 20 and T + 5 < G + 60. (With G 8m and T 600 the go
# command killed the guest at 540 s, before any of it could speak: CI of
# 46831c9.) The packages take 12-25 s (numa, cgroup, docker) and 440-520 s
# (nodeagent, e2e) on a quiet machine.
# These three measure no CPU shares, so their guests run every vCPU on one
# host thread (single-threaded TCG: 14, 25 and 38 s on 2026-11-26, against
# 12-27 s multi-threaded): the guests that hung without a word on
# 2026-11-26 (a cgroup guest before its init, the docker guest in the
# landing CI run of 28abfcf) were of these packages, under multi-threaded
# TCG; the nodeagent and e2e guests measure shares and keep one host
# thread per vCPU.
PINFOLD_VM_TCG_THREAD=single CGO_ENABLED=0 go test -p 1 -count=1 -v -tags kernel -run '^TestKernel' -timeout 4m \
  -exec "$PWD/hack/vm/run --docker --timeout 280" "${kernel_pkgs[@]:0:3}" 2>&1 | tee "$log" | grep -vE '^(=== |pinfold-vm: time=)'
rc=${PIPESTATUS[0]}
# The node agent's: the share sweep (30 runs, ~7 min in the guest) and the
# split scheme with stacked threads (~1.5 min) on 3 + 2
# CPUs, so one CPU is left to the system as on a host with reserved CPUs,
# and the pressure-guided memory shrink.
PINFOLD_VM_CPUS_PER_NODE=3,2 CGO_ENABLED=0 go test -p 1 -count=1 -v -tags kernel -run '^TestKernel' -timeout 22m \
  -exec "$PWD/hack/vm/run --timeout 1360" ./nodeagent/ 2>&1 | tee -a "$log" | grep -vE '^(=== |pinfold-vm: time=)'
rc=$(( rc | PIPESTATUS[0] ))
set -e
[ "$rc" = 0 ] || { summary "$log" "the kernel tier"; echo "kernel tier failed (exit $rc)"; exit 1; }
if grep -q 'no tests to run' "$log" || [ "$(grep -c '^--- PASS: TestKernel' "$log")" -lt "${#kernel_pkgs[@]}" ]; then
  echo "kernel tier ran no tests in some package: it must not skip"; exit 1
fi
echo "== e2e tier (built binaries in the QEMU guest)"
CGO_ENABLED=0 go build -ldflags "$(vcs_ldflags)" -o bin/pinfold ./cmd/pinfold
# 3 + 2 CPUs: 3 × 1.3 bound fit NUMA-locally (more than 5 vCPUs hang under TCG here).
# Guest limit 2700 s: the tier took 1,594 s on a quiet 2-core machine on
# 2026-11-28 (7 tests; the workload and docker-share tests have planners
# and agents of their own), ~340-440 s before them; the limit leaves a
# loaded machine about 70 % more.
set +e
PINFOLD_VM_CPUS_PER_NODE=3,2 PINFOLD_VM_ENV="PINFOLD_BIN=$PWD/bin/pinfold" CGO_ENABLED=0 go test -p 1 -count=1 -v -tags e2e -run '^TestE2E' -timeout 47m \
  -exec "$PWD/hack/vm/run --docker --timeout 2700" ./test/e2e/ 2>&1 | tee "$log" | grep -vE '^(=== |pinfold-vm: time=)'
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || { summary "$log" "the e2e tier"; echo "e2e tier failed (exit $rc)"; exit 1; }
[ "$(grep -c '^--- PASS: TestE2E' "$log")" -ge 7 ] || { echo "e2e tier ran fewer tests than it has: it must not skip"; exit 1; }
echo "== all tiers passed in $(( $(date +%s) - T0 )) s"
