package api

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
)

// Metrics are the planner's Prometheus series, served at /metrics:
//
//	pinfold_planner_requests_total{method,code}         API calls by method and outcome
//	pinfold_planner_request_duration_seconds{method}   their latency
//	pinfold_planner_commits_total{outcome}             etcd transactions: ok, conflict, too_large, error
//	pinfold_planner_commit_writes                      writes per transaction (histogram)
//	pinfold_planner_hosts{state}                       hosts by state: up, down, disabled, maintenance, protocol
//	pinfold_planner_instances{state}                   instances by state: pending, running, updating, exited, …
//	pinfold_planner_cpu_capacity_cpus, _cpu_used_cpus  CPUs in capacity and held, over all hosts
//	pinfold_planner_memory_capacity_bytes, _memory_used_bytes
//	pinfold_planner_hosts_over_nominal{resource}      hosts above their nominal capacity (the overbooking in use): memory, numa_memory, cpu
//	pinfold_planner_leader                             1 while this planner runs the background loops
//	pinfold_planner_panics_recovered_total             panics recovered (each an internal error of one request or step)
//	pinfold_planner_refused_calls_total{identity,method} calls that ended in an error and changed nothing
//	pinfold_planner_refused_events_suppressed_total    their events not written (over an identity's budget a minute)
//	pinfold_planner_events_dropped_total               events never written: the queue full, or every write failed
//	pinfold_planner_streams_open{kind}                 streams open: watch (agents' links and WatchInstances), link (the links among them), view (/ui/events)
//	pinfold_planner_streams_refused_total{kind}        streams refused over their bound (per host, per identity)
//	pinfold_planner_identity_limited_total{limit,role,method} requests refused over a per-identity bound: connections, rate, heavy, body
//	pinfold_planner_identity_connections_open          connections held by callers with a client certificate
//	pinfold_planner_identity_rate_entries              identities in the rate table (bounded)
type Metrics struct {
	Registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	commits  *prometheus.CounterVec
	writes   prometheus.Histogram
	// streams are the stream bounds of the Handler serving these metrics.
	streams atomic.Pointer[streamSet]
	// limits are the per-identity bounds of that Handler.
	limits atomic.Pointer[identityLimits]
}

// streamSet is a Handler's stream bounds.
type streamSet struct {
	watch, view *streamLimits
	links       *links // the agent links among the watches (nil: none)
}

// NewMetrics registers the planner's series over svc (read at each scrape)
// and the Go runtime's and the process's.
func NewMetrics(svc Planner) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinfold_planner_requests_total",
			Help: "API calls by method and outcome (a Connect code, or ok)."}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pinfold_planner_request_duration_seconds",
			Help: "API call latency by method.", Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}}, []string{"method"}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinfold_planner_commits_total",
			Help: "Guarded etcd transactions by outcome: ok, conflict (re-planned), too_large (split), error."}, []string{"outcome"}),
		writes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pinfold_planner_commit_writes",
			Help: "Writes per etcd transaction (a commit group merges several requests).", Buckets: prometheus.ExponentialBuckets(1, 4, 8)}),
	}
	reg.MustRegister(m.requests, m.duration, m.commits, m.writes, stateCollector{svc}, streamCollector{m}, limitCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveCommit records one commit (state.Store.ObserveCommits).
func (m *Metrics) ObserveCommit(writes int, outcome string) {
	m.commits.WithLabelValues(outcome).Inc()
	m.writes.Observe(float64(writes))
}

// interceptor counts and times every API call.
func (m *Metrics) interceptor() connect.Interceptor { return metricsInterceptor{m} }

type metricsInterceptor struct{ m *Metrics }

func (i metricsInterceptor) observe(procedure string, start time.Time, err error) {
	i.m.observe(procedure, start, err)
}

// observe counts and times one call of procedure, begun at start, that
// ended in err: every call the API answers, whether the interceptors saw
// it or precheck refused it before it was read.
func (m *Metrics) observe(procedure string, start time.Time, err error) {
	method := procedure[strings.LastIndexByte(procedure, '/')+1:]
	code := "ok"
	if err != nil && !errors.Is(err, context.Canceled) {
		code = connect.CodeOf(err).String()
	} else if err != nil {
		code = "canceled"
	}
	m.requests.WithLabelValues(method, code).Inc()
	m.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

func (i metricsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		i.observe(req.Spec().Procedure, start, err)
		return resp, err
	}
}

func (i metricsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i metricsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		i.observe(conn.Spec().Procedure, start, err)
		return err
	}
}

// stateCollector reads hosts, instances, capacity and leadership at each
// scrape from the planner's cache (no etcd read).
type stateCollector struct{ svc Planner }

var (
	descHosts     = prometheus.NewDesc("pinfold_planner_hosts", "Registered hosts by state.", []string{"state"}, nil)
	descInstances = prometheus.NewDesc("pinfold_planner_instances", "Instances by state (their hosts' last report).", []string{"state"}, nil)
	descCPUCap    = prometheus.NewDesc("pinfold_planner_cpu_capacity_cpus", "CPUs in the hosts' capacity (pieces / share base).", nil, nil)
	descCPUUsed   = prometheus.NewDesc("pinfold_planner_cpu_used_cpus", "CPUs held by bound instances (pieces / share base).", nil, nil)
	descMemCap    = prometheus.NewDesc("pinfold_planner_memory_capacity_bytes", "Memory in the hosts' capacity.", nil, nil)
	descMemUsed   = prometheus.NewDesc("pinfold_planner_memory_used_bytes", "Memory planned for instances.", nil, nil)
	descOverNom   = prometheus.NewDesc("pinfold_planner_hosts_over_nominal", "Hosts holding more than their nominal capacity of a resource (memory, numa_memory: a NUMA node's, cpu: a CPU's pieces): only the overbooking allows it.", []string{"resource"}, nil)
	descLeader    = prometheus.NewDesc("pinfold_planner_leader", "1 while this planner runs the background loops (healing, drains, the audit).", nil, nil)
	descPanics    = prometheus.NewDesc("pinfold_planner_panics_recovered_total", "Panics recovered in requests and background steps (each an internal error of that request or step; the stack is in the log).", nil, nil)
	descRefused   = prometheus.NewDesc("pinfold_planner_refused_calls_total", "Calls that ended in an error and changed nothing, by identity and method (past 1,000 series, new identities count as (other)).", []string{"identity", "method"}, nil)
	descDropped   = prometheus.NewDesc("pinfold_planner_events_dropped_total", "Events of the event log never written: its queue (4,096) full, or every write of them failed (6 attempts over about 16 s: no etcd leader, a timeout).", nil, nil)
	descSuppress  = prometheus.NewDesc("pinfold_planner_refused_events_suppressed_total", "Events of refused calls not written: over the identity's budget of events a minute (summarized in one Suppressed event).", nil, nil)
)

func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHosts, descInstances, descCPUCap, descCPUUsed, descMemCap, descMemUsed, descOverNom, descLeader, descPanics, descRefused, descSuppress, descDropped} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	sb := float64(c.svc.Params().ShareBase)
	hosts := map[string]float64{"up": 0, "down": 0, "disabled": 0, "maintenance": 0, "protocol": 0}
	var cpuCap, cpuUsed, memCap, memUsed float64
	over := map[string]float64{"memory": 0, "numa_memory": 0, "cpu": 0}
	for _, v := range c.svc.Hosts() {
		hosts[v.State()]++
		for r := range overResources(v, int(sb)) {
			over[r]++
		}
		for id, p := range v.Host.CPUs {
			cpuCap += float64(p)
			cpuUsed += float64(v.Alloc.Used[id])
		}
		memCap += float64(v.Host.MemoryBytes)
		memUsed += float64(v.Alloc.MemoryUsed)
	}
	for st, n := range hosts {
		ch <- prometheus.MustNewConstMetric(descHosts, prometheus.GaugeValue, n, st)
	}
	ins := map[string]float64{"pending": 0, "running": 0}
	for _, iv := range c.svc.Instances("", "") {
		ins[service.InstanceState(iv.Instance, iv.Status)]++
	}
	for st, n := range ins {
		ch <- prometheus.MustNewConstMetric(descInstances, prometheus.GaugeValue, n, st)
	}
	ch <- prometheus.MustNewConstMetric(descCPUCap, prometheus.GaugeValue, cpuCap/sb)
	ch <- prometheus.MustNewConstMetric(descCPUUsed, prometheus.GaugeValue, cpuUsed/sb)
	ch <- prometheus.MustNewConstMetric(descMemCap, prometheus.GaugeValue, memCap)
	ch <- prometheus.MustNewConstMetric(descMemUsed, prometheus.GaugeValue, memUsed)
	for r, n := range over {
		ch <- prometheus.MustNewConstMetric(descOverNom, prometheus.GaugeValue, n, r)
	}
	leader := 0.0
	if c.svc.Leading() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descPanics, prometheus.CounterValue, float64(c.svc.Panics()))
	refused, suppressed := c.svc.RefusedCalls()
	for k, n := range refused {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n), k.Identity, k.Method)
	}
	ch <- prometheus.MustNewConstMetric(descSuppress, prometheus.CounterValue, float64(suppressed))
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(c.svc.EventsDropped()))
}

var (
	descStreamsOpen    = prometheus.NewDesc("pinfold_planner_streams_open", "Streams open: watch (agents' links and WatchInstances streams), link (the agent links among them), view (the web view's /ui/events).", []string{"kind"}, nil)
	descStreamsRefused = prometheus.NewDesc("pinfold_planner_streams_refused_total", "Streams refused over their bound: watch (agents' links and WatchInstances streams, MaxWatchesPerHost per host), view (MaxViewsPerIdentity per identity).", []string{"kind"}, nil)
)

// streamCollector reads the stream bounds' counts at each scrape.
type streamCollector struct{ m *Metrics }

func (streamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descStreamsOpen
	ch <- descStreamsRefused
}

func (c streamCollector) Collect(ch chan<- prometheus.Metric) {
	set := c.m.streams.Load()
	if set == nil {
		return
	}
	for kind, l := range map[string]*streamLimits{"watch": set.watch, "view": set.view} {
		ch <- prometheus.MustNewConstMetric(descStreamsOpen, prometheus.GaugeValue, float64(l.openStreams()), kind)
		ch <- prometheus.MustNewConstMetric(descStreamsRefused, prometheus.CounterValue, float64(l.refused.Load()), kind)
	}
	if set.links != nil {
		ch <- prometheus.MustNewConstMetric(descStreamsOpen, prometheus.GaugeValue, float64(set.links.count()), "link")
	}
}

// overResources is the set of resources (the labels of
// pinfold_planner_hosts_over_nominal) host v holds past its nominal
// capacity.
func overResources(v state.HostView, shareBase int) map[string]bool {
	out := map[string]bool{}
	for _, o := range service.OverNominal(v, shareBase) {
		switch {
		case o.Resource == "cpu" || o.Resource == "memory":
			out[o.Resource] = true
		default: // "NUMA node N memory"
			out["numa_memory"] = true
		}
	}
	return out
}
