package nodeagent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	promodel "github.com/prometheus/common/model"

	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestMetrics: gopsutil measures this machine; MetricsChanged filters noise.
func TestMetrics(t *testing.T) {
	m, err := HostMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m.MemTotalBytes == 0 || m.MemAvailableBytes == 0 || m.MemAvailableBytes > m.MemTotalBytes || m.Load1 < 0 {
		t.Errorf("HostMetrics = %+v", m)
	}
	base := &pinfoldv1.HostMetrics{Load1: 1, MemTotalBytes: 1000, MemAvailableBytes: 500}
	for _, tc := range []struct {
		m    *pinfoldv1.HostMetrics
		want bool
	}{
		{&pinfoldv1.HostMetrics{Load1: 1.1, MemTotalBytes: 1000, MemAvailableBytes: 510}, false},
		{&pinfoldv1.HostMetrics{Load1: 1.3, MemTotalBytes: 1000, MemAvailableBytes: 500}, true},
		{&pinfoldv1.HostMetrics{Load1: 1, MemTotalBytes: 1000, MemAvailableBytes: 560}, true},
		{&pinfoldv1.HostMetrics{Load1: 1, MemTotalBytes: 2000, MemAvailableBytes: 500}, true},
	} {
		if got := MetricsChanged(base, tc.m); got != tc.want {
			t.Errorf("MetricsChanged(%+v) = %v, want %v", tc.m, got, tc.want)
		}
	}
	if !MetricsChanged(nil, base) {
		t.Errorf("first metrics not sent")
	}
}

func TestMemoryMoved(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		sent, now int64
		want      bool
	}{
		{0, mib - 1, false},               // below 1 MiB
		{0, mib, true},                    // first MiB
		{40 * mib, 40*mib + mib/2, false}, // growth under 1 MiB
		// The e2e case: caught at 37.8 MiB while a 40 MiB file was written.
		{37*mib + 800*1024, 40 * mib, true},
		{400 * mib, 403 * mib, false},      // growth under 1%
		{400 * mib, 404 * mib, true},       // growth of 1%
		{400 * mib, 370 * mib, false},      // a drop under 10%
		{400 * mib, 360 * mib, true},       // a drop of 10%
		{5 * mib, 4*mib + 512*1024, false}, // a 10% drop under 1 MiB
	} {
		if got := memoryMoved(tc.sent, tc.now); got != tc.want {
			t.Errorf("memoryMoved(sent %d, now %d) = %v, want %v", tc.sent, tc.now, got, tc.want)
		}
	}
}

// TestCPUGot: the CPU a container gets is measured from cpu.stat between
// passes, reported in pieces, and re-sent only when it moved enough.
func TestCPUGot(t *testing.T) {
	a, _, cg, pl := newTestAgent(t)
	cg.usage = map[string]uint64{}
	in := memInst(1, 128<<20)
	in.CPUs = map[cpuset.CPUID]int{0: 100, 2: 70}
	a.SetDesired([]model.Instance{in})
	settle(t, a)
	obs := func(usage uint64) []Observed {
		return []Observed{{Container: docker.Container{ID: "c1", Instance: "db-1", Running: true}, CPUUsageUsec: usage}}
	}
	t0 := time.Now().Add(cpuWindow) // a window after settle's own sample, so t0 is the baseline
	a.measure([]model.Instance{in}, obs(1_000_000), 100, t0)
	a.measure([]model.Instance{in}, obs(1_000_000+3_400_000), 100, t0.Add(2*time.Second)) // 1.7 CPUs for 2 s
	if got := a.records["db-1"].cpuGot; got != 170 {
		t.Errorf("cpuGot = %d pieces, want 170", got)
	}
	// Through a real pass: the fake kernel's counter advances 1.2 CPUs.
	cg.mu.Lock()
	cg.usage["docker/c1"] = 0
	cg.mu.Unlock()
	a.Reconcile(context.Background())
	time.Sleep(cpuWindow)
	cg.mu.Lock()
	cg.usage["docker/c1"] = 1_200_000
	cg.mu.Unlock()
	a.Reconcile(context.Background())
	r := pl.last("db-1")
	if r.CpuGotPieces < 90 || r.CpuGotPieces > 125 {
		t.Errorf("reported cpu_got = %d pieces after 1.2 s of CPU in ~1 s, want about 120", r.CpuGotPieces)
	}
	for _, tc := range []struct {
		sent, now int
		want      bool
	}{
		{170, 172, false}, {170, 178, false}, {170, 179, true}, {0, 4, false}, {0, 5, true}, {1000, 1040, false}, {1000, 1050, true}, {200, 150, true},
	} {
		if got := cpuMoved(tc.sent, tc.now, 100); got != tc.want {
			t.Errorf("cpuMoved(%d, %d) = %v, want %v", tc.sent, tc.now, got, tc.want)
		}
	}
	// Another container (a replace) or a counter going back is no sample.
	if _, ok := piecesPerSecond(cpuSample{"c1", 10, t0}, cpuSample{"c2", 20, t0.Add(time.Second)}, 100); ok {
		t.Errorf("a sample across containers was used")
	}
	if _, ok := piecesPerSecond(cpuSample{"c1", 10, t0}, cpuSample{"c1", 5, t0.Add(time.Second)}, 100); ok {
		t.Errorf("a counter that went back was used")
	}
}

// TestAgentMetrics: the agent's series, scraped over HTTP and parsed as the
// Prometheus text format: per instance the plan, the memory and pressure
// read from its cgroup, the actions, reconcile and Docker call latency.
func TestAgentMetrics(t *testing.T) {
	a, _, cg, _ := newTestAgent(t)
	a.SetDesired([]model.Instance{memInst(1, 128<<20)})
	settle(t, a)
	cg.mu.Lock()
	cg.mem["docker/c1"] = 40 << 20
	cg.throttled = map[string]uint64{"docker/c1": 7}
	cg.memSome = map[string]float64{"docker/c1": 12.5}
	cg.mu.Unlock()
	reg := prometheus.NewRegistry()
	if err := a.Register(reg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(promodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string, labels ...string) (float64, bool) {
		for _, m := range fams[name].GetMetric() {
			ok := true
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				ok = ok && found
			}
			if !ok {
				continue
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
		return 0, false
	}
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pinfold_agent_instance_cpu_planned_cpus", []string{"instance", "db-1", "service", "db"}, 1},
		{"pinfold_agent_instance_memory_limit_bytes", []string{"instance", "db-1"}, 128 << 20},
		{"pinfold_agent_instance_memory_current_bytes", []string{"instance", "db-1"}, 40 << 20},
		{"pinfold_agent_instance_cpu_throttled_periods_total", []string{"instance", "db-1"}, 7},
		{"pinfold_agent_instance_memory_pressure_some_ratio", []string{"instance", "db-1"}, 0.125},
		{"pinfold_agent_instance_cpu_pressure_some_ratio", []string{"instance", "db-1"}, 0},
		{"pinfold_agent_actions_total", []string{"kind", "create", "result", "ok"}, 1},
	} {
		if v, ok := get(tc.name, tc.labels...); !ok || v != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.name, tc.labels, v, ok, tc.want)
		}
	}
	for _, name := range []string{"pinfold_agent_reconcile_duration_seconds", "pinfold_agent_docker_call_duration_seconds"} {
		if v, ok := get(name); !ok || v == 0 {
			t.Errorf("%s: %v observations (present %v), want some", name, v, ok)
		}
	}
	if _, ok := get("pinfold_agent_instance_cpu_used_cpus", "instance", "db-1"); !ok {
		t.Errorf("pinfold_agent_instance_cpu_used_cpus missing for a running instance")
	}
}
