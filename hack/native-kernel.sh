#!/usr/bin/env bash
# The kernel tier run natively, on a real kernel, instead of in the QEMU
# guest: the cgroup package's TestKernel* and the node agent's (the share
# sweep, the pressure-guided memory shrink). It needs root and cgroup v2 at
# /sys/fs/cgroup with cpu, cpuset, memory and pids, and fails saying so
# otherwise; tests that need 2 NUMA nodes are left out on a host with one
# (they run in the guest) and the script says so.
#
#   hack/native-kernel.sh             build static test binaries, run them here
#   hack/native-kernel.sh --build DIR only build them into DIR, with DIR/run.sh,
#                                     for a root host without Go: copy DIR
#                                     there and run DIR/run.sh
# hack/test.sh --native-kernel runs the first form.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(cgroup nodeagent)
build() {
  mkdir -p "$1"
  for p in "${pkgs[@]}"; do CGO_ENABLED=0 go test -c -tags kernel -o "$1/$p.test" "./$p"; done
  cat > "$1/run.sh" <<'RUN'
#!/bin/sh
# Runs pinfold's kernel-tier test binaries natively (root, cgroup v2).
here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "native kernel tier: must run as root (uid $(id -u)): it creates cgroups under /sys/fs/cgroup"; exit 1
fi
if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ]; then
  echo "native kernel tier: /sys/fs/cgroup is not cgroup v2 ($(stat -fc %T /sys/fs/cgroup 2>&1)): this host cannot run it"; exit 1
fi
nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
skip=
if [ "$nodes" -lt 2 ]; then
  skip=NUMA
  echo "native kernel tier: $nodes NUMA node(s): the tests that need 2 (names with NUMA) are left out here; the guest runs them"
fi
echo "native kernel tier on $(uname -sr), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
rc=0
for t in "$here"/*.test; do
  echo "== $(basename "$t" .test)"
  "$t" -test.run '^TestKernel' ${skip:+-test.skip "$skip"} -test.v -test.timeout 30m || rc=1
done
[ $rc = 0 ] && echo "== native kernel tier passed" || echo "== native kernel tier FAILED"
exit $rc
RUN
  chmod +x "$1/run.sh"
}
if [ "${1:-}" = --build ]; then
  . hack/lib.sh; ensure_go
  build "${2:?--build needs a directory}"
  echo "built $(ls "$2") in $2: copy it to a root cgroup v2 host and run $2/run.sh"
  exit 0
fi
. hack/lib.sh; ensure_go
out=bin/kernel
build "$out"
exec "$out/run.sh"
