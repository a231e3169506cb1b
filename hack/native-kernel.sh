#!/usr/bin/env bash
# The kernel tier run natively, on a real kernel, instead of in the QEMU
# guest: the cgroup package's TestKernel* and the node agent's (the share
# sweep, the pressure-guided memory shrink). Tests that need 2 NUMA nodes
# are left out on a host with one (they run in the guest) and the script
# says so.
usage() {
  cat <<'USAGE'
usage: hack/native-kernel.sh [--matrix] [--build DIR | --check | --help]

  (no argument)   check this host, build static kernel-tier test binaries
                  into bin/kernel and run them here
  --matrix        instead of the kernel tier, run the workload matrix
                  (nodeagent TestKernelWorkloadMatrix: every workload of
                  test/workload under every candidate fragment mechanism,
                  up to 4 pairs at once on 16 CPUs) and print its tables;
                  PINFOLD_MATRIX_CANDIDATES, _CASES, _REPS (default 2),
                  _SETTLE, _WINDOW, _BUDGET narrow it (docs/AGENT.md,
                  "The workload matrix")
  --build DIR     only build them into DIR, with DIR/run.sh, for a root host
                  without Go: copy DIR there and run DIR/run.sh (which runs
                  the checks below first; DIR/run.sh --matrix runs the
                  matrix)
  --check         only run the checks below and say what was found
  -h, --help      print this and exit

Checks, before anything is built or run: root (the tests create cgroups
under /sys/fs/cgroup), cgroup v2 at /sys/fs/cgroup, at least 5 CPUs (the
share sweep uses CPUs 0-3 and leaves one to the system), and an idle
machine: at least PINFOLD_NATIVE_IDLE % (default 90) of the CPU time idle
over 2 s, so that nothing else skews the sweep's measurements.
hack/test.sh --native-kernel runs the first form.
USAGE
}
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(cgroup nodeagent)

# checks is POSIX sh: run here before building, and copied into run.sh.
read -r -d '' checks <<'CHECKS' || true
if [ "$(id -u)" != 0 ]; then
  echo "native kernel tier: must run as root (found uid $(id -u)): it creates cgroups under /sys/fs/cgroup" >&2; exit 1
fi
fs=$(stat -fc %T /sys/fs/cgroup 2>&1)
if [ "$fs" != cgroup2fs ]; then
  echo "native kernel tier: /sys/fs/cgroup is not cgroup v2 (found: $fs): this host cannot run it" >&2; exit 1
fi
ncpu=$(nproc)
if [ "$ncpu" -lt 5 ]; then
  echo "native kernel tier: needs at least 5 CPUs (found $ncpu): the share sweep uses CPUs 0-3 and leaves one to the system" >&2; exit 1
fi
idle_min=${PINFOLD_NATIVE_IDLE:-90}
s1=$(head -1 /proc/stat); sleep 2; s2=$(head -1 /proc/stat)
idle=$(printf '%s\n%s\n' "$s1" "$s2" | awk '{t=0; for (i=2; i<=NF; i++) t+=$i; id=$5+$6} NR==1 {t1=t; i1=id} NR==2 {if (t>t1) printf "%d", 100*(id-i1)/(t-t1); else print 100}')
if [ "$idle" -lt "$idle_min" ]; then
  echo "native kernel tier: the machine is not idle (found $idle % of CPU time idle over 2 s, want at least $idle_min %): stop other work first, the share sweep measures CPU shares" >&2; exit 1
fi
echo "native kernel tier: checks passed: root, cgroup v2, $ncpu CPUs, $idle % idle over 2 s"
CHECKS

build() {
  mkdir -p "$1"
  for p in "${pkgs[@]}"; do CGO_ENABLED=0 go test -c -tags kernel -o "$1/$p.test" "./$p"; done
  {
    cat <<'RUN'
#!/bin/sh
# Runs pinfold's kernel-tier test binaries natively (root, cgroup v2, at
# least 5 CPUs, an idle machine: checked first).
here=$(cd "$(dirname "$0")" && pwd)
RUN
    printf '%s\n' "$checks"
    cat <<'RUN'
nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
skip=
if [ "$nodes" -lt 2 ]; then
  skip=NUMA
  echo "native kernel tier: $nodes NUMA node(s): the tests that need 2 (names with NUMA) are left out here; the guest runs them"
fi
echo "native kernel tier on $(uname -sr), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
case ${1:-} in
'') ;;
--matrix) ;;
*) echo "run.sh: unknown argument $1 (want none, or --matrix)" >&2; exit 2;;
esac
if [ "${1:-}" = --matrix ]; then
  echo "== the workload matrix"
  PINFOLD_MATRIX=1 PINFOLD_MATRIX_REPS=${PINFOLD_MATRIX_REPS:-2} "$here/nodeagent.test" -test.run '^TestKernelWorkloadMatrix$' -test.v -test.timeout 90m
  exit
fi
rc=0
for t in "$here"/*.test; do
  echo "== $(basename "$t" .test)"
  "$t" -test.run '^TestKernel' ${skip:+-test.skip "$skip"} -test.v -test.timeout 30m || rc=1
done
[ $rc = 0 ] && echo "== native kernel tier passed" || echo "== native kernel tier FAILED"
exit $rc
RUN
  } > "$1/run.sh"
  chmod +x "$1/run.sh"
}

matrix=
args=()
for a in "$@"; do
  if [ "$a" = --matrix ]; then matrix=--matrix; else args+=("$a"); fi
done
set -- "${args[@]+"${args[@]}"}"
case $# in
0) ;;
*)
  case $1 in
  -h|--help) usage; exit 0;;
  --check) [ $# = 1 ] || { echo "hack/native-kernel.sh: --check takes no argument (got: ${*:2})" >&2; usage >&2; exit 2; }
    sh -c "$checks"; exit;;
  --build)
    if [ $# != 2 ] || [ -z "$2" ]; then
      echo "hack/native-kernel.sh: --build needs exactly one directory (got: ${*:2})" >&2; usage >&2; exit 2
    fi
    . hack/lib.sh; ensure_go
    build "$2"
    echo "built $(ls "$2" | tr '\n' ' ')in $2: copy it to a root cgroup v2 host and run $2/run.sh $matrix"
    exit 0;;
  *) echo "hack/native-kernel.sh: unknown argument: $1" >&2; usage >&2; exit 2;;
  esac;;
esac
sh -c "$checks"
. hack/lib.sh; ensure_go
out=bin/kernel
build "$out"
exec "$out/run.sh" $matrix
