package service

import (
	"slices"
	"strings"

	textclip "github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/model"
)

// Bounds on what one request may carry: every string the planner stores
// is served back to agents and clients, so none is unbounded.
const (
	// MaxDeployCount is the most instances one deploy may ask for
	// (model.MaxDeployCount: one etcd transaction).
	MaxDeployCount = model.MaxDeployCount
	MaxImageLen    = 512
	// MaxCommandEnvBytes bounds an instance's command and environment
	// together.
	MaxCommandEnvBytes = 64 << 10
	MaxConstraintLen   = 4 << 10
	MaxHostTypeLen     = 63
	MaxPropertyLen     = 256 // a property's value
	MaxProperties      = 64
	MaxRuleServices    = 64 // services named by one affinity list
	// MinInstanceMemory is the smallest memory an instance may have
	// (model.MinInstanceMemory: the Docker engine's smallest limit).
	MinInstanceMemory = model.MinInstanceMemory
	// MaxHostMemory is the most memory a host (or one NUMA node) may be
	// given: 1 PiB, far above any machine, and far enough below the int64
	// limit that scaling it by an overbooking factor cannot overflow (8 EiB
	// was accepted, and health then called the host oversold).
	MaxHostMemory = 1 << 50
	// maxEcho is how much of an offending value an error repeats.
	maxEcho = 200
)

// Bounds on the fields of an API request, checked where the request
// enters (planner/api's requestBounds names the bound of every string,
// bytes, list and map field), before it is planned, stored or recorded.
// The service's own checks (a name's characters, a spec's total size)
// apply after them.
const (
	// MaxNameLen bounds a name (host, service, instance, network, rule
	// entry, fault or upgrade domain): a DNS name's 253 bytes.
	MaxNameLen = 253
	// MaxWordLen bounds a keyword or a number given as text (a strategy,
	// a state, a decimal CPU amount, a duration, an event ID).
	MaxWordLen = 64
	// MaxAgentVersionLen bounds the version an agent reports: stored with
	// its host and served by every host listing (a 3 MB one was, issue 26
	// N6). "v1.2.3-45-gdeadbeef-dirty" is 25 bytes.
	MaxAgentVersionLen = 128
	// MaxNoAgentLen bounds why a host has no agent (Host.NoAgent): a
	// prerequisite's error with its fix.
	MaxNoAgentLen = 2048
	// MaxCPUListLen bounds a CPU list ("0-3,8"): the text cpuset.Parse
	// looks at.
	MaxCPUListLen = 64 << 10
	// MaxTopologyBytes bounds a registration's topology: the largest
	// valid one (8,192 CPUs that all list one L3 group) is 1.1 MB.
	MaxTopologyBytes = 2 << 20
	// MaxCommandEnvEntries bounds the entries of a command, an environment
	// or a health check's exec (each entry also within MaxCommandEnvBytes).
	MaxCommandEnvEntries = 4096
	// MaxHostsListed bounds a list of hosts in a request (a deploy's
	// hosts_order, a replace's hosts): stored with a service's rules.
	MaxHostsListed = 10_000
	// MaxSettingsEntries bounds each map of the placement settings.
	MaxSettingsEntries = 64
	// MaxCPUEntries bounds a per-CPU or per-NUMA-node map: one entry per
	// ID 0..cpuset.MaxID.
	MaxCPUEntries = 8192
	// MaxHealthHTTPLen bounds a health check's "PORT/PATH".
	MaxHealthHTTPLen = 1024
	// MaxAppliedListLen bounds the cpuset.cpus and cpuset.mems an agent
	// reports as applied.
	MaxAppliedListLen = 4096
	// MaxPageTokenLen bounds a page token: it holds at most a host name
	// and an instance ID, base64-encoded (pages.go).
	MaxPageTokenLen = 1024
)

// Pages of a listing (ListHosts, ListInstances): one call answers at most
// MaxPageSize entries, so that its memory and its message stay flat in the
// cluster's size; a page_size of 0 asks for DefaultPageSize.
const (
	DefaultPageSize = 500
	// MaxPageSize: a ListHosts page of 5,000 hosts is about 10 MiB as
	// protobuf (hosts with 64 CPUs), well under a client's 64 MiB read limit.
	MaxPageSize = 5000
)

// ValidateAgentVersion checks the version an agent reports.
func ValidateAgentVersion(v string) error {
	switch {
	case len(v) > MaxAgentVersionLen:
		return errf(Invalid, "agent_version = %q: %d bytes, want at most %d", clip(v), len(v), MaxAgentVersionLen)
	case strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return errf(Invalid, "agent_version = %q: no control characters", clip(v))
	}
	return nil
}

// clip is s cut to maxEcho characters for an error message.
func clip(s string) string { return textclip.Text(s, maxEcho) }

// validateSpec checks the bounds and characters of what an instance runs
// (an empty image is allowed: the instance stays pending until replaced).
func validateSpec(sp model.Spec) error {
	switch {
	case len(sp.Image) > MaxImageLen:
		return errf(Invalid, "image = %q: longer than %d bytes", clip(sp.Image), MaxImageLen)
	case strings.ContainsAny(sp.Image, " \t\r\n\x00"):
		return errf(Invalid, "image = %q: no blanks, newlines or NULs", clip(sp.Image))
	}
	n := 0
	for field, list := range map[string][]string{"command": sp.Command, "env": sp.Env} {
		for _, v := range list {
			n += len(v)
			if strings.ContainsAny(v, "\x00") || field == "env" && strings.ContainsAny(v, "\r\n") {
				if field == "env" {
					v = EnvName(v) // never a value in an error (it goes to the event log)
				}
				return errf(Invalid, "%s entry %q: no NULs (and no newlines in env)", field, clip(v))
			}
			if field == "env" && !strings.Contains(v, "=") {
				return errf(Invalid, "env entry %q: want NAME=VALUE", clip(v))
			}
		}
	}
	if n > MaxCommandEnvBytes {
		return errf(Invalid, "command and env = %d bytes: want at most %d", n, MaxCommandEnvBytes)
	}
	if err := ValidateNetwork(sp.Network); err != nil {
		return err
	}
	if err := sp.Container.Validate(); err != nil {
		return errf(Invalid, "%w", err)
	}
	if err := model.ValidatePorts(sp.Ports, sp.Network); err != nil {
		return errf(Invalid, "%s", err)
	}
	for _, p := range sp.Ports {
		for _, e := range sp.Env {
			if k, _, _ := strings.Cut(e, "="); k == model.PortEnv(p.Name) {
				return errf(Invalid, "env entry %q: %s is the host port of port %q, which pinfold sets", clip(EnvName(e)), k, p.Name)
			}
		}
	}
	return ValidateHealth(sp.Health)
}

// validateRules checks the bounds of a deploy's placement rules (their
// syntax is placement's to check).
func validateRules(r model.Rules) error {
	if len(r.Constraint) > MaxConstraintLen {
		return errf(Invalid, "constraint = %q: longer than %d bytes", clip(r.Constraint), MaxConstraintLen)
	}
	for field, list := range map[string][]string{"affinity": slices.Concat(r.Affinity.Hard, r.Affinity.Soft),
		"anti_affinity": slices.Concat(r.AntiAffinity.Hard, r.AntiAffinity.Soft), "hosts_order": r.HostsOrder} {
		if field != "hosts_order" && len(list) > MaxRuleServices {
			return errf(Invalid, "%s: %d services: want at most %d", field, len(list), MaxRuleServices)
		}
		for _, name := range list {
			if len(name) > 253 {
				return errf(Invalid, "%s entry %q: longer than 253 bytes", field, clip(name))
			}
		}
	}
	return nil
}

// validStates are the states a host may report.
var validStates = map[string]bool{"pending": true, "running": true, "paused": true, "exited": true, "oom_killed": true, "error": true}

// validateStatus checks what an agent reports.
func validateStatus(st model.Status) error {
	switch {
	case !validStates[st.State]:
		return errf(Invalid, "state = %q: want pending, running, paused, exited, oom_killed or error", clip(st.State))
	case st.PID < 0:
		return errf(Invalid, "pid = %d: want 0 or more", st.PID)
	case st.Generation < 0 || st.Refused < 0:
		return errf(Invalid, "generation = %d, refused_generation = %d: want 0 or more", st.Generation, st.Refused)
	case st.MemoryCurrent < 0 || st.CPUGot < 0:
		return errf(Invalid, "memory_current_bytes = %d, cpu_got_pieces = %d: want 0 or more", st.MemoryCurrent, st.CPUGot)
	case len(st.Error) > model.MaxStatusErrorLen:
		return errf(Invalid, "error: %d bytes: want at most %d", len(st.Error), model.MaxStatusErrorLen)
	case len(st.ContainerID) > 128:
		return errf(Invalid, "container_id = %q: longer than 128 bytes", clip(st.ContainerID))
	}
	if a := st.Applied; a != nil && len(a.CPUs)+len(a.Mems) > 4096 {
		return errf(Invalid, "applied cpus and mems: longer than 4096 bytes")
	}
	return nil
}
