package nodeagent

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/model"
)

// promMetrics are the agent's Prometheus series (pinfold agent
// --metrics-listen):
//
//	pinfold_agent_instance_cpu_planned_cpus{instance,service}     what the planner gave
//	pinfold_agent_instance_cpu_used_cpus{instance,service}        what the kernel delivered over the last window (cpu.stat)
//	pinfold_agent_instance_cpu_throttled_periods_total{…}         cpu.stat nr_throttled
//	pinfold_agent_instance_memory_current_bytes{…}, _memory_limit_bytes{…}
//	pinfold_agent_instance_cpu_pressure_some_ratio{…}, _memory_pressure_some_ratio{…}   avg10 of cpu.pressure and memory.pressure
//	pinfold_agent_reconcile_duration_seconds                      one pass: observe, diff, report, apply
//	pinfold_agent_actions_total{kind,result}                      actions by kind (create, update, replace, …) and ok/error
//	pinfold_agent_docker_call_duration_seconds{call}              Docker Engine API latency
type promMetrics struct {
	reconcile prometheus.Histogram
	actions   *prometheus.CounterVec
	docker    *prometheus.HistogramVec
}

func newPromMetrics() *promMetrics {
	return &promMetrics{
		reconcile: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pinfold_agent_reconcile_duration_seconds",
			Help: "One reconcile pass: observe, diff, report, apply.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinfold_agent_actions_total",
			Help: "Actions applied, by kind and result (ok or error)."}, []string{"kind", "result"}),
		docker: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pinfold_agent_docker_call_duration_seconds",
			Help: "Docker Engine API call latency.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}, []string{"call"}),
	}
}

// Register adds the agent's series, read at each scrape, to reg.
func (a *Agent) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{a.prom.reconcile, a.prom.actions, a.prom.docker, instanceCollector{a}} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *promMetrics) action(kind Kind, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.actions.WithLabelValues(string(kind), result).Inc()
}

// timedEngine times every Docker call.
type timedEngine struct {
	engine
	h *prometheus.HistogramVec
}

func (e timedEngine) time(call string, start time.Time) {
	e.h.WithLabelValues(call).Observe(time.Since(start).Seconds())
}

func (e timedEngine) List(ctx context.Context) ([]docker.Container, error) {
	defer e.time("list", time.Now())
	return e.engine.List(ctx)
}
func (e timedEngine) Create(ctx context.Context, s docker.CreateSpec) (string, error) {
	defer e.time("create", time.Now())
	return e.engine.Create(ctx, s)
}
func (e timedEngine) Start(ctx context.Context, id string) error {
	defer e.time("start", time.Now())
	return e.engine.Start(ctx, id)
}
func (e timedEngine) Inspect(ctx context.Context, id string) (docker.Container, error) {
	defer e.time("inspect", time.Now())
	return e.engine.Inspect(ctx, id)
}
func (e timedEngine) Update(ctx context.Context, id string, r docker.Resources) (docker.Container, error) {
	defer e.time("update", time.Now())
	return e.engine.Update(ctx, id, r)
}
func (e timedEngine) Pause(ctx context.Context, id string) error {
	defer e.time("pause", time.Now())
	return e.engine.Pause(ctx, id)
}
func (e timedEngine) Unpause(ctx context.Context, id string) error {
	defer e.time("unpause", time.Now())
	return e.engine.Unpause(ctx, id)
}
func (e timedEngine) Remove(ctx context.Context, id string) error {
	defer e.time("remove", time.Now())
	return e.engine.Remove(ctx, id)
}
func (e timedEngine) Exec(ctx context.Context, id string, cmd []string) (int, error) {
	defer e.time("exec", time.Now())
	return e.engine.Exec(ctx, id, cmd)
}
func (e timedEngine) Pull(ctx context.Context, image string) error {
	defer e.time("pull", time.Now())
	return e.engine.Pull(ctx, image)
}

// instanceCollector reports each desired instance at scrape time: the plan
// and what the agent measured, and its cgroup's figures read then.
type instanceCollector struct{ a *Agent }

var (
	descPlanned   = prometheus.NewDesc("pinfold_agent_instance_cpu_planned_cpus", "CPU the planner gave the instance (held pieces, or the memory-first quota), in CPUs.", []string{"instance", "service"}, nil)
	descUsed      = prometheus.NewDesc("pinfold_agent_instance_cpu_used_cpus", "CPU the instance used over the agent's last window (cpu.stat usage_usec), in CPUs.", []string{"instance", "service"}, nil)
	descThrottled = prometheus.NewDesc("pinfold_agent_instance_cpu_throttled_periods_total", "cpu.stat nr_throttled of the instance's cgroup.", []string{"instance", "service"}, nil)
	descMemCur    = prometheus.NewDesc("pinfold_agent_instance_memory_current_bytes", "memory.current of the instance's cgroup.", []string{"instance", "service"}, nil)
	descMemLimit  = prometheus.NewDesc("pinfold_agent_instance_memory_limit_bytes", "The instance's planned memory limit (memory.max).", []string{"instance", "service"}, nil)
	descCPUPress  = prometheus.NewDesc("pinfold_agent_instance_cpu_pressure_some_ratio", "cpu.pressure some avg10 of the instance's cgroup, 0..1.", []string{"instance", "service"}, nil)
	descMemPress  = prometheus.NewDesc("pinfold_agent_instance_memory_pressure_some_ratio", "memory.pressure some avg10 of the instance's cgroup, 0..1.", []string{"instance", "service"}, nil)
)

func (instanceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPlanned, descUsed, descThrottled, descMemCur, descMemLimit, descCPUPress, descMemPress} {
		ch <- d
	}
}

func (c instanceCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	a.mu.Lock()
	desired := append([]model.Instance(nil), a.desired...)
	sb := float64(max(a.host.ShareBase, 1))
	type seen struct {
		got  int
		path cgroup.Path
	}
	recs := map[string]seen{} // running instances: their cgroup
	for _, in := range desired {
		if r := a.records[in.ID]; r != nil && r.cgroup != nil {
			recs[in.ID] = seen{got: r.cpuGot, path: *r.cgroup}
		}
	}
	a.mu.Unlock()
	for _, in := range desired {
		l := []string{in.ID, in.Service}
		ch <- prometheus.MustNewConstMetric(descPlanned, prometheus.GaugeValue, float64(in.Pieces())/sb, l...)
		ch <- prometheus.MustNewConstMetric(descMemLimit, prometheus.GaugeValue, float64(in.Memory), l...)
		r, ok := recs[in.ID]
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descUsed, prometheus.GaugeValue, float64(r.got)/sb, l...)
		path := r.path
		if v, err := a.cg.Read(path, "cpu.stat"); err == nil {
			if n, ok := statField(v, "nr_throttled"); ok {
				ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, n, l...)
			}
		}
		if v, err := a.cg.Read(path, "memory.current"); err == nil {
			if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				ch <- prometheus.MustNewConstMetric(descMemCur, prometheus.GaugeValue, n, l...)
			}
		}
		for file, d := range map[string]*prometheus.Desc{"cpu.pressure": descCPUPress, "memory.pressure": descMemPress} {
			if v, err := a.cg.Read(path, file); err == nil {
				if n, ok := someAvg10(v); ok {
					ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, n/100, l...)
				}
			}
		}
	}
}

// statField reads "key value" from a flat-keyed cgroup file.
func statField(v, key string) (float64, bool) {
	for _, line := range strings.Split(v, "\n") {
		k, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			return n, err == nil
		}
	}
	return 0, false
}

// someAvg10 reads the "some" line's avg10 (a percentage) of a PSI file.
func someAvg10(v string) (float64, bool) {
	for _, line := range strings.Split(v, "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if s, ok := strings.CutPrefix(f, "avg10="); ok {
				n, err := strconv.ParseFloat(s, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}
