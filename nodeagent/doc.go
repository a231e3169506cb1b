// Package nodeagent is the per-host daemon that makes the planner's
// decisions true: it registers the host with its discovered topology, holds
// its heartbeat, watches the host's desired instances, and converges Docker
// containers and their cgroup v2 files to them.
//
// The loop is level-triggered and the same for every change: observe
// (pinfold-labelled containers), Diff (pure: desired × observed → actions),
// apply (Docker create/update/remove, direct cgroup writes of what Docker
// cannot express), checkpoint (what was applied), report (status to the
// planner). Every action is idempotent, so a crash between any two steps is
// repaired by the next pass; the planner is the source of truth, Docker and
// the kernel are observed, and the checkpoint only caches.
//
// It never touches containers without pinfold's labels.
package nodeagent
