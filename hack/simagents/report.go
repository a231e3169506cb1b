package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// usage is a process's CPU time and resident memory.
type usage struct {
	CPU time.Duration
	RSS int64
}

// procUsage reads /proc/PID/stat (utime, stime) and /proc/PID/status (VmRSS).
func procUsage(pid int) usage {
	var u usage
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+2:])
			if len(f) > 12 {
				ut, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				u.CPU = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				u.RSS = kb << 10
			}
		}
	}
	return u
}

// report is what the run measured.
type report struct {
	// Phases is -phases: "registration" measured only the registration
	// and the memory after it.
	Phases              string  `json:"phases"`
	Agents              int     `json:"agents"`
	RegisterSeconds     float64 `json:"register_seconds"`
	RegisterPerSecond   float64 `json:"registrations_per_second"`
	SteadySeconds       float64 `json:"steady_seconds"`
	HeartbeatsPerSecond float64 `json:"heartbeats_per_second"`
	HeartbeatErrors     int64   `json:"heartbeat_errors"`
	Deploys             int     `json:"deploys"`
	NotifyP50Ms         float64 `json:"notify_p50_ms"`
	NotifyP99Ms         float64 `json:"notify_p99_ms"`
	NotifyMaxMs         float64 `json:"notify_max_ms"`
	NotifyMissed        int     `json:"notify_missed"`
	FirstDeployMs       float64 `json:"first_deploy_ms"`      // after registration, before the measured ones
	DeployP50Ms         float64 `json:"deploy_answer_p50_ms"` // the deploy call's own answer
	DeployP99Ms         float64 `json:"deploy_answer_p99_ms"`
	// SlowDeploys are the deploys answered after more than 200 ms: when
	// each was sent (seconds into the steady phase) and how long it took.
	SlowDeploys         []string `json:"slow_deploys,omitempty"`
	PlannerCPUPercent   float64  `json:"planner_cpu_percent"` // of one core, steady phase
	EtcdCPUPercent      float64  `json:"etcd_cpu_percent"`
	SimCPUPercent       float64  `json:"simulator_cpu_percent"`
	PlannerRSSMiB       float64  `json:"planner_rss_mib"`
	EtcdRSSMiB          float64  `json:"etcd_rss_mib"`
	SimRSSMiB           float64  `json:"simulator_rss_mib"`
	PlannerRSSPerHostKB float64  `json:"planner_rss_per_host_kib"`
	// From the planner's profiler, after a collection, at the end of the
	// steady phase (of the registration with -phases registration).
	PlannerHeapMiB        float64 `json:"planner_heap_mib"`
	PlannerHeapPerHostKB  float64 `json:"planner_heap_per_host_kib"`
	PlannerStackPerHostKB float64 `json:"planner_stack_per_host_kib"`
	PlannerGoroutines     int     `json:"planner_goroutines"`
	PlannerHeapPerDeploy  float64 `json:"planner_heap_per_deploy_bytes"`
	// From etcd's own metrics over the steady phase (its deploys
	// included), per minute: revisions (puts and deletes), raft entries
	// committed (every write, lease grants too; a lease keep-alive is
	// none), lease grants; Metrics is -metrics.
	Metrics                  string  `json:"metrics"`
	EtcdRevisionsPerMinute   float64 `json:"etcd_revisions_per_minute"`
	EtcdRaftEntriesPerMinute float64 `json:"etcd_raft_entries_per_minute"`
	EtcdLeaseGrantsPerMinute float64 `json:"etcd_lease_grants_per_minute"`
	RestartSeconds           float64 `json:"restart_seconds"` // planner start → every agent streaming and heartbeating again
	RestartPlannerStart      float64 `json:"restart_planner_start_seconds"`
	AfterRestartCPU          float64 `json:"planner_cpu_percent_after_restart"`
}

// print writes the table; after -phases registration only the rows that
// phase measured (the others were zeros that read as measured: a planner
// restart "after 0.0 s", etcd "0 MiB").
func (r report) print(w io.Writer) {
	fmt.Fprintf(w, `
simulated agents          %d
registration              %.1f s (%.0f/s, each with its stream and first heartbeat)
`, r.Agents, r.RegisterSeconds, r.RegisterPerSecond)
	if r.Phases != "registration" {
		fmt.Fprintf(w, `steady phase              %.0f s: %.0f heartbeats/s, %d heartbeat errors
first deploy              %.0f ms (builds the planner's views of the registered hosts)
deploy → agent notified   %d deploys: p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d never seen (the deploy's answer: p50 %.1f ms, p99 %.1f ms)
CPU (of one core)         planner %.1f %%, etcd %.1f %%, simulator %.1f %% (steady phase)
etcd writes a minute      %.0f revisions (%.2f per agent), %.0f raft entries, %.0f lease grants (steady phase, its deploys included; -metrics %s)
`, r.SteadySeconds, r.HeartbeatsPerSecond, r.HeartbeatErrors,
			r.FirstDeployMs, r.Deploys, r.NotifyP50Ms, r.NotifyP99Ms, r.NotifyMaxMs, r.NotifyMissed, r.DeployP50Ms, r.DeployP99Ms,
			r.PlannerCPUPercent, r.EtcdCPUPercent, r.SimCPUPercent,
			r.EtcdRevisionsPerMinute, r.EtcdRevisionsPerMinute/float64(max(r.Agents, 1)), r.EtcdRaftEntriesPerMinute, r.EtcdLeaseGrantsPerMinute, r.Metrics)
	}
	fmt.Fprintf(w, `memory (RSS)              planner %.0f MiB (%.1f KiB per host), etcd %.0f MiB, simulator %.0f MiB
planner heap (live)       %.0f MiB (%.1f KiB per host); stacks %.1f KiB per host; %d goroutines`,
		r.PlannerRSSMiB, r.PlannerRSSPerHostKB, r.EtcdRSSMiB, r.SimRSSMiB,
		r.PlannerHeapMiB, r.PlannerHeapPerHostKB, r.PlannerStackPerHostKB, r.PlannerGoroutines)
	if r.Phases == "registration" {
		fmt.Fprintln(w, "\n(-phases registration: no steady phase, deploys or restart)")
		return
	}
	fmt.Fprintf(w, `; steady phase: %.0f B more per deploy
planner restart           API up after %.1f s; every agent streaming and heartbeating %.1f s after the restart; planner CPU then %.1f %%
deploys over 200 ms       %v (sent at : took)
`, r.PlannerHeapPerDeploy, r.RestartPlannerStart, r.RestartSeconds, r.AfterRestartCPU, r.SlowDeploys)
}

// plannerStats are the planner's memory figures from its profiler.
type plannerStats struct {
	heap, stack int64 // live heap after a collection; goroutine stacks in use
	goroutines  int
}

// plannerMem reads the planner's live heap (after a collection it asks
// for) and stacks from the runtime statistics its heap profile ends with,
// and its goroutines.
func plannerMem(pprofAt string) (plannerStats, error) {
	var st plannerStats
	get := func(path string) (string, error) {
		resp, err := http.Get("http://" + pprofAt + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	heap, err := get("/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		return st, fmt.Errorf("the planner's heap profile: %w", err)
	}
	for _, l := range strings.Split(heap, "\n") {
		if v, ok := strings.CutPrefix(l, "# HeapAlloc = "); ok {
			st.heap, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "# Stack = "); ok { // "inuse / sys"
			st.stack, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	g, err := get("/debug/pprof/goroutine?debug=1")
	if err != nil {
		return st, fmt.Errorf("the planner's goroutines: %w", err)
	}
	first, _, _ := strings.Cut(g, "\n")
	if v, ok := strings.CutPrefix(first, "goroutine profile: total "); ok {
		st.goroutines, _ = strconv.Atoi(v)
	}
	return st, nil
}

// memory fills the planner's memory figures: its RSS first (the
// profiler's collection does not shrink it at once, but reading the
// profiles allocates), then its heap, stacks and goroutines.
func (r *report) memory(pid int, pprofAt string) plannerStats {
	u := procUsage(pid)
	r.PlannerRSSMiB = float64(u.RSS) / (1 << 20)
	r.PlannerRSSPerHostKB = float64(u.RSS) / 1024 / float64(r.Agents)
	st, err := plannerMem(pprofAt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "simagents:", err)
		return st
	}
	r.PlannerHeapMiB = float64(st.heap) / (1 << 20)
	r.PlannerHeapPerHostKB = float64(st.heap) / 1024 / float64(r.Agents)
	r.PlannerStackPerHostKB = float64(st.stack) / 1024 / float64(r.Agents)
	r.PlannerGoroutines = st.goroutines
	return st
}

// etcdFigures are the etcd metrics etcdWrites reads.
var etcdFigures = []string{"etcd_debugging_mvcc_current_revision", "etcd_server_proposals_committed_total", "etcd_debugging_lease_granted_total"}

// etcdWrites reads etcdFigures from etcd's /metrics at endpoint (as
// waitEtcd reads /health: this tool is no etcd client); a figure it could
// not read is missing.
func etcdWrites(endpoint string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		fmt.Fprintln(os.Stderr, "simagents: etcd metrics:", err)
		return out
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		fmt.Fprintln(os.Stderr, "simagents: etcd metrics:", err)
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		for _, f := range etcdFigures {
			if name == f {
				out[f], _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
	}
	return out
}

// etcdRates fills the etcd write figures from two readings el apart.
func (r *report) etcdRates(before, after map[string]float64, el time.Duration, metrics string) {
	per := func(f string) float64 { return (after[f] - before[f]) / el.Minutes() }
	r.Metrics = metrics
	r.EtcdRevisionsPerMinute = per(etcdFigures[0])
	r.EtcdRaftEntriesPerMinute = per(etcdFigures[1])
	r.EtcdLeaseGrantsPerMinute = per(etcdFigures[2])
}
