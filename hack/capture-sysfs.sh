#!/usr/bin/env bash
# Capture the topology-relevant part of this host's sysfs as a numa test fixture.
#
#   hack/capture-sysfs.sh NAME [SYSFS_ROOT]
#
# Copies an explicit allowlist of files (never the tree wholesale) by reading
# each one, into numa/testdata/sysfs/NAME, and /proc/meminfo into
# numa/testdata/proc/NAME/meminfo. Write the README (hardware, kernel, lscpu -e)
# by hand, then run `go test ./numa -update` to record the golden JSON.
set -euo pipefail
name=${1:?usage: hack/capture-sysfs.sh NAME [SYSFS_ROOT]}
sys=${2:-/sys}
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/numa/testdata/sysfs/$name
rm -rf "$out/devices"
copy() { # copy FILE relative to $sys, if it exists and is readable
  local src=$sys/$1
  [ -r "$src" ] || return 0
  mkdir -p "$out/$(dirname "$1")"
  cat "$src" > "$out/$1"
}
for f in online offline possible present isolated; do copy devices/system/cpu/$f; done
for d in "$sys"/devices/system/cpu/cpu[0-9]*; do
  c=${d#"$sys"/}
  copy "$c/online"
  for f in physical_package_id die_id core_id core_cpus_list thread_siblings_list package_cpus_list; do
    copy "$c/topology/$f"
  done
  for idx in "$d"/cache/index[0-9]*; do
    [ -d "$idx" ] || continue
    i=${idx#"$sys"/}
    copy "$i/level"; copy "$i/shared_cpu_list"
  done
done
if [ -d "$sys/devices/system/node" ]; then
  for f in online possible has_cpu has_memory; do copy devices/system/node/$f; done
  for d in "$sys"/devices/system/node/node[0-9]*; do
    n=${d#"$sys"/}
    for f in cpulist meminfo distance; do copy "$n/$f"; done
  done
fi
mkdir -p "$top/numa/testdata/proc/$name"
grep -E '^(MemTotal|MemFree|MemAvailable):' /proc/meminfo > "$top/numa/testdata/proc/$name/meminfo"
echo "captured $(find "$out/devices" -type f | wc -l) files into $out"
