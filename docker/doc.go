// Package docker is pinfold's Docker Engine adapter: it creates, starts,
// inspects, pauses, stops and removes the containers pinfold owns (marked
// with the io.pinfold.* labels; it refuses to touch any other container),
// translates a pinfold resource spec into the Engine API's
// container.Resources, updates them live, and computes each container's
// cgroup path so package cgroup can write what Docker cannot express.
//
// It uses the maintained Engine API client github.com/moby/moby/client (not
// the frozen github.com/docker/docker module) and negotiates the API version
// on first contact, down to Debian's docker.io 20.10 (API 1.41).
//
// Rules from the daemon source (research: kernel-and-libs.md §3.3) that the
// translation follows: MemorySwap is always sent with Memory (no swap:
// MemorySwap = Memory), cpusets are sent in full (an empty string means "no
// change" to the daemon), CPU limits use CPUPeriod/CPUQuota and never
// NanoCPUs (the two cannot be mixed over a container's life), and memory
// below 6 MiB is refused before the daemon is asked.
//
// One writer per cgroup file: Docker owns the files its update API sets
// (cpuset.cpus, cpuset.mems, cpu.max, memory.max, memory.swap.max,
// memory.low, cpu.weight through CPUShares); pinfold writes only the others
// (exact cpu.weight, cpu.max.burst) and re-asserts them after every Docker
// update.
//
// It imports planner/cpuset and the moby client; never package cgroup.
package docker
