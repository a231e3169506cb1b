package sim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

const (
	shareBase = 100
	MiB       = int64(1) << 20
	GiB       = int64(1) << 30
	// heartbeatTTL is the agents' lease: long in real time, so that a
	// lease never expires under a slow run; an agent dies by its live key
	// being deleted (what the lease's expiry does).
	heartbeatTTL = 10 * time.Minute
	// maxStepTime is the most simulated time one step takes.
	maxStepTime = 10 * time.Second
	// moveBound: a move in flight settles (finishes or aborts) within this
	// many steps: its agent reports within reportDelay steps, or its host
	// dies and the move aborts.
	moveBound = 40
	// drainBound: past it, each instance left on a draining host is moving
	// or parked with a logged reason (or waiting out an aborted move's
	// backoff).
	drainBound = 150
	// healMargin: steps past the down grace by which a dead host's
	// instances are placed again or their failure is logged.
	healMargin  = 3
	reportDelay = 6
	minHosts    = 2
	maxHosts    = 9
	// maxProbe is the largest capacity the probe deploys to check it.
	maxProbe = 120
	probe    = "probe"
)

// servicesPool are the services the operations use (probe is the
// capacity probe's own).
var servicesPool = []string{"web", "db", "cache", "batch", "api", "queue"}

// Config is one run.
type Config struct {
	Seed  uint64
	Steps int
	// Until ends the run early (zero: none).
	Until time.Time
	// Progress, when set, receives one line per step before it runs
	// ("SIMSTEP n kind: what"), so that a crash in another goroutine is
	// attributed to its step by the parent process.
	Progress io.Writer
	// VerifyEvery runs the full audit every that many steps (0: 1).
	VerifyEvery int
	// Verbose writes every operation and refusal to Progress.
	Verbose bool
}

// Result is what a run did.
type Result struct {
	Seed    uint64
	Steps   int
	Elapsed time.Duration
	Ops     map[string]*OpStats
	// Settled counts moves, drains and heals seen to end.
	Moves, Drains, Heals, Restarts, Probes int
	// Indexed counts the deploys the room index placed (each checked
	// against the full plan: Service.CheckIndex).
	Indexed int64
	// Known counts the open defects (knownDefects) the run met; KnownAt
	// is where each was first met, with the operations before it.
	Known   map[string]int
	KnownAt map[string]string
}

// knownDefects are defects the simulation found that are not fixed yet:
// the run counts them instead of failing, so that it keeps finding new
// ones. Delete an entry with its fix; the seeds in regressions show it.
var knownDefects = map[string]string{}

// known counts an open defect of knownDefects.
func (w *world) known(kind, detail string) {
	if _, ok := knownDefects[kind]; !ok {
		w.fail("unknown known defect %q", kind)
	}
	w.res.Known[kind]++
	if w.res.KnownAt == nil {
		w.res.KnownAt = map[string]string{}
	}
	if _, ok := w.res.KnownAt[kind]; !ok {
		w.res.KnownAt[kind] = fmt.Sprintf("seed %d step %d: %s; after:\n  %s", w.res.Seed, w.step, detail, strings.Join(w.history, "\n  "))
	}
	w.note("known defect: " + kind + ": " + detail)
}

// OpStats counts one kind of operation.
type OpStats struct {
	Done    int            `json:"done"`
	Refused int            `json:"refused"`
	Codes   map[string]int `json:"codes,omitempty"`
}

type agent struct {
	host     string
	alive    bool
	joined   bool // its first heartbeat came (a host added by hand has none before)
	joinAt   int
	returnAt int
	beatAt   int
	diedAt   int
}

type report struct {
	gen int64
	at  int
}

// world is the simulated cluster: the real service and store over
// embedded etcd, the simulated agents and clock, and the checks' memory.
type world struct {
	t   testing.TB
	cfg Config
	rng *rand.Rand
	// empty draws whether a resize or replace targets a service scaled to
	// 0 (a stream of its own: the main one, and so every seed's sequence
	// of operations, is what it was before it existed).
	empty *rand.Rand
	// sized draws whether a resize brings its targets to a size (apply's
	// resize) instead of deltas, and the size: its own stream, so that
	// the other draws of a seed, and the seeds kept as regressions, stay.
	sized   *rand.Rand
	step    int
	stepNow atomic.Int64
	now     time.Time
	ctx     context.Context

	cluster *statetest.Cluster
	st      *state.Store
	svc     *service.Service
	ticker  *service.Ticker
	logs    *capture

	agents   map[string]*agent
	nextHost int
	overbook map[string]float64
	reports  map[string]report

	res      Result
	history  []string
	moving   map[string]int       // a move's new instance → the step it was first seen
	draining map[string]int       // a draining host → the step its drain was first seen
	down     map[string]time.Time // a host seen down (the leader's tracker, as an oracle) → since
	downStep map[string]int
}

func newWorld(t testing.TB, cfg Config) *world {
	if cfg.VerifyEvery <= 0 {
		cfg.VerifyEvery = 1
	}
	w := &world{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		empty: rand.New(rand.NewPCG(cfg.Seed^0x5bd1e995, cfg.Seed)),
		sized: rand.New(rand.NewPCG(cfg.Seed^0x27d4eb2f, cfg.Seed)),
		// SetMaintenance reads the real clock: the simulated one starts
		// there (and runs ahead, a few seconds a step).
		now: time.Now().UTC().Truncate(time.Second), ctx: context.Background(),
		agents: map[string]*agent{}, reports: map[string]report{}, moving: map[string]int{}, draining: map[string]int{},
		down: map[string]time.Time{}, downStep: map[string]int{}, overbook: map[string]float64{}}
	w.res = Result{Seed: cfg.Seed, Ops: map[string]*OpStats{}, Known: map[string]int{}}
	w.logs = &capture{w: w, aborted: map[string]time.Time{}}
	w.cluster = statetest.Start(t, 1, func(c *state.EmbedConfig) { c.UnsafeNoFsync = true })
	w.open()
	t.Cleanup(func() { w.st.Close() })
	// The seed's overbooking is fixed for the run: lowering it under
	// instances placed with it (heals may use it) would make the audit
	// report what the settings allowed when they were placed.
	switch w.rng.IntN(4) {
	case 1:
		w.overbook["memory"] = 0.25
	case 2:
		w.overbook["cpu"] = 0.5
	}
	if len(w.overbook) > 0 {
		if _, err := w.svc.SetPlacementSettings(w.ctx, placement.Settings{Overbooking: w.overbook}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 + w.rng.IntN(4) {
		w.addHost(true)
	}
	return w
}

// open opens the store and the service over etcd, as a planner starting.
func (w *world) open() {
	st, err := state.Open(w.ctx, state.Dial{Endpoints: w.cluster.Endpoints}, state.Config{ShareBase: shareBase, MaxFragmentCores: -1}, model.Protocol, nil)
	if err != nil {
		w.fail("opening the store: %v", err)
	}
	w.st = st
	w.svc = service.New(st, slog.New(w.logs))
	w.svc.CheckIndex() // every deploy the room index answers is planned in full too
	w.ticker = w.svc.NewTicker()
}

// restart closes the planner (store and service) and opens it again over
// the same etcd: the new leader's memory starts empty.
func (w *world) restart() {
	w.res.Indexed += w.svc.IndexAnswers()
	w.st.Close()
	w.open()
	w.down = map[string]time.Time{}
	w.downStep = map[string]int{}
	w.res.Restarts++
}

// fail reports a defect with the seed, the step and the operations that
// led there, and ends the run.
func (w *world) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("DEFECT seed %d step %d: %s\nlast operations (oldest first):\n  %s\nreplay: hack/sim.sh --seed %d --steps %d",
		w.cfg.Seed, w.step, fmt.Sprintf(format, args...), strings.Join(w.history, "\n  "), w.cfg.Seed, w.step)
}

func (w *world) note(s string) {
	w.history = append(w.history, fmt.Sprintf("%d: %s", w.step, s))
	if w.cfg.Verbose && w.cfg.Progress != nil {
		fmt.Fprintf(w.cfg.Progress, "%d: %s\n", w.step, s)
	}
	if len(w.history) > 40 {
		w.history = w.history[1:]
	}
}

// run runs the steps.
func (w *world) run() Result {
	start := time.Now()
	for w.step < w.cfg.Steps && (w.cfg.Until.IsZero() || time.Now().Before(w.cfg.Until)) {
		w.oneStep()
	}
	w.res.Steps = w.step
	w.res.Elapsed = time.Since(start)
	w.res.Indexed += w.svc.IndexAnswers()
	return w.res
}

func (w *world) oneStep() {
	w.step++
	w.stepNow.Store(int64(w.step))
	defer func() {
		if r := recover(); r != nil {
			w.fail("panic: %v\n%s", r, debug.Stack())
		}
	}()
	w.now = w.now.Add(time.Second + time.Duration(w.rng.Int64N(int64(maxStepTime-time.Second))))
	w.agentsStep()
	// The agents' writes reach the cache before anything reads it, so
	// that a run depends on its seed, not on the watch's timing.
	if err := w.st.Sync(w.ctx); err != nil {
		w.fail("sync: %v", err)
	}
	o := w.pick()
	if w.cfg.Progress != nil {
		fmt.Fprintf(w.cfg.Progress, "SIMSTEP %d %s: %s\n", w.step, o.kind, o.what)
	}
	w.note(o.kind + ": " + o.what)
	if o.run != nil {
		before := w.snapshot()
		err := o.run()
		w.outcome(o, err, before)
	}
	// The leader's pass sees the operation's writes, as the checks after
	// it do. Without this a pass could read the cache before the watch
	// brought it an agent's death that the checks then saw: an agent that
	// returned and died again within one step (seed 4, step 1592, CI on
	// f378897) was live for the pass, which restarted the host's down
	// grace, and dead for the checks, which kept the older start and
	// reported a heal that had not come (the oracle's down time was 332 s
	// old, the leader's 14 steps).
	if err := w.st.Sync(w.ctx); err != nil {
		w.fail("sync: %v", err)
	}
	w.ticker.Tick(w.ctx, w.now)
	w.check()
}

// op is one operation: kind (for the summary), what it does, and run
// (nil: the operation did its own checks).
type op struct {
	kind, what string
	run        func() error
	// want: the code a refusal must have ("" any); invalid: the request
	// is invalid, so it must be refused.
	want    service.Code
	invalid bool
	// never: a code a refusal must not have (a scale of a deployed
	// service is never invalid: the record it deploys from was accepted).
	never service.Code
}

func (w *world) stats(kind string) *OpStats {
	s, ok := w.res.Ops[kind]
	if !ok {
		s = &OpStats{Codes: map[string]int{}}
		w.res.Ops[kind] = s
	}
	return s
}

// outcome checks an operation's result: accepted, or refused with a
// service code and a reason (for a resource refusal, the rule that binds),
// changing nothing.
func (w *world) outcome(o op, err error, before snapshot) {
	s := w.stats(o.kind)
	if err == nil {
		if o.invalid {
			w.fail("%s: an invalid request was accepted: %s", o.kind, o.what)
		}
		s.Done++
		return
	}
	s.Refused++
	code := service.CodeOf(err)
	s.Codes[string(code)]++
	w.note(fmt.Sprintf("  refused (%s): %s", code, firstLine(err.Error())))
	switch {
	case code == "":
		w.fail("%s: an internal error (no service code, so no rule): %v", o.kind, err)
	case code == service.Conflicted:
		w.fail("%s: a conflict with no other writer: %v", o.kind, err)
	case strings.TrimSpace(err.Error()) == "":
		w.fail("%s: refused (%s) with an empty message", o.kind, code)
	case o.want != "" && code != o.want:
		w.fail("%s: refused with %s, want %s: %v", o.kind, code, o.want, err)
	case o.never != "" && code == o.never:
		w.fail("%s: refused with %s: %v", o.kind, code, err)
	case code == service.Exhausted && bindingRule(err) == "":
		w.fail("%s: a resource refusal that names no rule or engine error: %v", o.kind, err)
	}
	if d := before.diff(w.snapshot()); d != "" {
		w.fail("%s: refused (%v) but changed the store: %s", o.kind, firstLine(err.Error()), d)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// bindingRule is what binds in a resource refusal: the placement rule
// that eliminated hosts, the allocation engine's code, or the domain
// spread; "" when the error says none.
func bindingRule(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if se, ok := e.(*service.Error); ok {
			for _, el := range se.Eliminations {
				if len(el.Hosts) > 0 {
					return string(el.Rule)
				}
			}
			if se.Alloc != nil {
				return "alloc:" + string(se.Alloc.Code)
			}
		}
		if ae, ok := e.(*alloc.Error); ok {
			return "alloc:" + string(ae.Code)
		}
	}
	if strings.Contains(err.Error(), "domain spread") {
		return "domain spread"
	}
	// More instances than hosts with a static port free: the port's one
	// instance per host binds, and no host was eliminated.
	if strings.Contains(err.Error(), "a static port allows one instance per host") {
		return string(placement.RulePorts)
	}
	// "h1 takes 0 (memory)": what limits each host.
	if m := takesRe.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return ""
}

var takesRe = regexp.MustCompile(`takes \d+ \(([^)]+)\)`)

// snapshot is the store's documents by revision: what a refused
// operation must leave as it was.
type snapshot struct {
	hosts    map[string][2]int64
	ins      map[string]int64
	svcs     map[string]int64
	settings string
}

func (w *world) snapshot() snapshot {
	s := snapshot{hosts: map[string][2]int64{}, ins: map[string]int64{}, svcs: map[string]int64{}}
	for _, v := range w.st.Hosts() {
		s.hosts[v.Host.Name] = [2]int64{v.HostRev, v.AllocRev}
	}
	for _, v := range w.st.Instances("") {
		s.ins[v.Instance.ID] = v.Rev
	}
	for _, n := range append(slices.Clone(servicesPool), probe) {
		if d, ok := w.st.Service(n); ok {
			s.svcs[n] = d.Rev
		}
	}
	s.settings = fmt.Sprintf("%+v", w.st.PlacementSettings())
	return s
}

func (a snapshot) diff(b snapshot) string {
	for _, m := range []struct {
		what string
		a, b map[string]int64
	}{{"instance", a.ins, b.ins}, {"service", a.svcs, b.svcs}} {
		for _, k := range slices.Sorted(maps.Keys(m.a)) {
			if r, ok := m.b[k]; !ok || r != m.a[k] {
				return fmt.Sprintf("%s %s revision %d → %d (0: gone)", m.what, k, m.a[k], r)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(m.b)) {
			if _, ok := m.a[k]; !ok {
				return fmt.Sprintf("%s %s appeared", m.what, k)
			}
		}
	}
	if !maps.Equal(a.hosts, b.hosts) {
		return fmt.Sprintf("hosts' revisions %v → %v", a.hosts, b.hosts)
	}
	if a.settings != b.settings {
		return fmt.Sprintf("settings %s → %s", a.settings, b.settings)
	}
	return ""
}

// capture is the service's log as the checks read it: the moves aborted
// (their instances back off before a drain moves them again). Why a
// drain or a heal is stuck, the checks read from the host (Stuck).
type capture struct {
	w       *world
	mu      sync.Mutex
	aborted map[string]time.Time // instance → when a move of it was aborted
	panics  []string             // panics the service recovered, with their stacks
}

func (c *capture) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (c *capture) WithAttrs([]slog.Attr) slog.Handler           { return c }
func (c *capture) WithGroup(string) slog.Handler                { return c }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Message == "internal error recovered; the planner keeps serving" {
		c.panics = append(c.panics, fmt.Sprintf("in %s: %s\n%s", attrs["where"], attrs["panic"], attrs["stack"]))
	}
	if m := attrs["move"]; r.Message == "move settled" && strings.HasSuffix(m, "(aborted)") {
		old, _, _ := strings.Cut(m, "→")
		c.aborted[old] = c.w.now
	}
	return nil
}

// --- agents ---

// addHost registers a new host: by its agent (it heartbeats at once) or
// by hand (its agent joins a few steps later).
func (w *world) addHost(byAgent bool) (string, error) {
	w.nextHost++
	name := fmt.Sprintf("h%02d", w.nextHost)
	sh := topologytest.Shape{Name: name, Packages: 1 + w.rng.IntN(2), DiesPerPackage: 1, CoresPerDie: 2 + w.rng.IntN(3),
		ThreadsPerCore: 1 + w.rng.IntN(2), MemoryPerNode: int64(4+4*w.rng.IntN(3)) * GiB, RemoteDistance: 21}
	r := service.RegisterHostRequest{Name: name, Topology: sh.Topology(), Settings: state.CapacitySettings{MemoryShare: 1}}
	if byAgent {
		r.Agent, r.AgentVersion, r.Protocol = true, "sim", model.Protocol
	}
	if _, err := w.svc.RegisterHost(w.ctx, r); err != nil {
		return name, err
	}
	a := &agent{host: name, alive: true, joinAt: w.step + 1 + w.rng.IntN(10)}
	w.agents[name] = a
	if byAgent {
		w.beat(a)
	}
	return name, nil
}

func (w *world) beat(a *agent) {
	if err := w.svc.Heartbeat(w.ctx, a.host, "sim", model.Protocol, heartbeatTTL, nil); err != nil {
		w.fail("heartbeat of %s: %v", a.host, err)
	}
	a.joined = true
	a.beatAt = w.step + 20 + w.rng.IntN(40)
}

// kill makes host's agent vanish: its live key goes, as when its lease
// expires.
func (w *world) kill(a *agent) {
	if err := w.st.ExpireLive(w.ctx, a.host); err != nil {
		w.fail("%v", err)
	}
	a.alive, a.diedAt = false, w.step
	// Some come back before the down grace, some long after.
	a.returnAt = w.step + 1 + w.rng.IntN(120)
}

// agentsStep: dead agents return when due, live ones heartbeat and report
// their instances' state a few steps after a new generation appears.
func (w *world) agentsStep() {
	for _, name := range slices.Sorted(maps.Keys(w.agents)) {
		a := w.agents[name]
		if !a.alive {
			if w.step < a.returnAt {
				continue
			}
			a.alive = true
			w.note("agent of " + name + " returns")
			w.beat(a)
		}
		if !a.joined {
			if w.step < a.joinAt {
				continue
			}
			w.note("agent of " + name + " joins")
		}
		if !a.joined || w.step >= a.beatAt {
			w.beat(a)
		}
		for _, iv := range w.st.Instances(name) {
			w.reportOn(name, iv)
		}
	}
}

// reportOn reports an instance's state once its generation has waited its
// seeded delay: running, failed (its health gate), exited, or, for a
// resize, refused by the host.
func (w *world) reportOn(host string, iv state.InstanceView) {
	in := iv.Instance
	if st := iv.Status; st != nil && (st.Generation >= in.Generation || st.Refused == in.Generation) {
		delete(w.reports, in.ID)
		return
	}
	p, ok := w.reports[in.ID]
	if !ok || p.gen != in.Generation {
		w.reports[in.ID] = report{gen: in.Generation, at: w.step + w.rng.IntN(reportDelay)}
		return
	}
	if w.step < p.at {
		return
	}
	st := model.Status{State: "running", Generation: in.Generation}
	switch r := w.rng.IntN(100); {
	case r < 8:
		st.State, st.Error = "error", "health check failed"
	case r < 11:
		st.State, st.Error = "exited", "exit status 1"
	case r < 16 && in.Previous != nil && in.Previous.Generation == in.Generation:
		st = model.Status{State: "running", Generation: in.Generation - 1, Refused: in.Generation, Error: "memory shrink gave up under pressure"}
	}
	if err := w.svc.ReportStatus(w.ctx, host, in.ID, st); err != nil {
		w.fail("status report of %s on %s: %v", in.ID, host, err)
	}
	delete(w.reports, in.ID)
}

// --- checks ---

// check runs after every step: the planner answers, the audit is clean
// (every VerifyEvery steps), and moves, drains and heals settle or are
// parked with a reason within their bounds.
func (w *world) check() {
	if !w.svc.Healthy() {
		w.fail("the planner's cache no longer follows etcd")
	}
	w.logs.mu.Lock()
	panics := w.logs.panics
	w.logs.mu.Unlock()
	if len(panics) > 0 {
		w.fail("the service recovered a panic (an internal error): %s", panics[0])
	}
	views := w.svc.Hosts()
	if w.step%w.cfg.VerifyEvery == 0 {
		bad := service.Verify(w.st, shareBase)
		if len(bad) > 0 {
			w.fail("audit: %s", strings.Join(bad, "\n"))
		}
	}
	moving := map[string]bool{} // old instances with a move in flight
	seen := map[string]bool{}
	for _, v := range w.st.Moving() {
		in := v.Instance
		if in.Replaces == "" {
			continue
		}
		seen[in.ID], moving[in.Replaces] = true, true
		first, ok := w.moving[in.ID]
		if !ok {
			w.moving[in.ID] = w.step
		} else if w.step-first > moveBound {
			w.fail("the move %s → %s (on %s, status %+v) is in flight for %d steps", in.Replaces, in.ID, in.Host, v.Status, w.step-first)
		}
	}
	for id := range w.moving {
		if !seen[id] {
			delete(w.moving, id)
			w.res.Moves++
		}
	}
	grace := w.st.PlacementSettings().Grace()
	present := map[string]bool{}
	for _, v := range views {
		h := v.Host
		present[h.Name] = true
		// Drains.
		if !h.Draining {
			if _, ok := w.draining[h.Name]; ok {
				delete(w.draining, h.Name)
				w.res.Drains++
			}
		} else if first, ok := w.draining[h.Name]; !ok {
			w.draining[h.Name] = w.step
		} else if w.step-first > drainBound {
			for _, iv := range w.st.Instances(h.Name) {
				id := iv.Instance.ID
				w.logs.mu.Lock()
				abortedAt := w.logs.aborted[id]
				w.logs.mu.Unlock()
				// The new half of a move (it replaces an instance) waits for
				// its move to settle, which moveBound bounds: the drain moves
				// it after that.
				if !moving[id] && iv.Instance.Replaces == "" && h.Stuck == "" && w.now.Sub(abortedAt) > 30*time.Second {
					w.fail("instance %+v (status %+v) on host %s (live %t, state %s), draining since %s for %d steps, neither moves nor is parked with a reason (the host's stuck is empty)",
						iv.Instance, iv.Status, h.Name, v.Live, v.State(), h.DrainStarted, w.step-first)
				}
			}
		}
		// Heals: the leader's tracker, as an oracle.
		if !h.Agent || v.Live || !h.MaintenanceUntil.IsZero() && w.now.Before(h.MaintenanceUntil) {
			if _, ok := w.down[h.Name]; ok && v.Live {
				w.res.Heals++
			}
			delete(w.down, h.Name)
			continue
		}
		since, ok := w.down[h.Name]
		if !ok {
			since = w.now
			w.down[h.Name], w.downStep[h.Name] = w.now, w.step
		}
		// The leader's pass read the state the checks read (oneStep syncs
		// before it): it saw the host go down when the oracle did.
		if leader, seen := w.ticker.DownSince(h.Name); !seen || !leader.Equal(since) {
			w.fail("host %s is down since %s for the checks, but the leader's pass saw it %s", h.Name, since, w.ticker.About(h.Name))
		}
		if !ok {
			continue
		}
		if w.now.Sub(since) >= grace+healMargin*maxStepTime && w.step-w.downStep[h.Name] > healMargin {
			if ins := w.st.Instances(h.Name); len(ins) > 0 && h.Stuck == "" && h.Draining {
				w.fail("host %s, dead and draining, holds %d instances past the down grace with no reason (the host's stuck is empty): the drain's pass lost the heal's reason (found on seeds 9, 11, 12; fixed)", h.Name, len(ins))
			} else if len(ins) > 0 && h.Stuck == "" {
				var about []string
				for _, iv := range ins {
					about = append(about, fmt.Sprintf("%s (replaces %q, status %+v)", iv.Instance.ID, iv.Instance.Replaces, iv.Status))
				}
				leader := w.ticker.About(h.Name)
				moved, err := w.svc.Heal(w.ctx, h.Name, false)
				w.fail("host %s (state %s, maintenance until %s, draining %t) is down since %s (grace %s, now %s) and still holds %d instances with no reason (the host's stuck is empty): %s; the leader: %s; the usage document counts %v; a heal now: %d moved, %v",
					h.Name, v.State(), h.MaintenanceUntil, h.Draining, since, grace, w.now, len(ins), strings.Join(about, ", "), leader, v.Alloc.Instances, len(moved), err)
			}
		}
	}
	for h := range w.draining {
		if !present[h] {
			delete(w.draining, h)
		}
	}
}

// --- operations ---

// pick draws the step's operation.
func (w *world) pick() op {
	type choice struct {
		weight int
		make   func() (op, bool)
	}
	choices := []choice{
		{14, w.opDeploy}, {2, w.opDeployInvalid}, {6, w.opResize}, {6, w.opScale}, {4, w.opReplace}, {3, w.opRemove}, {3, w.opMove},
		{2, w.opHostAdd}, {5, w.opHostSet}, {2, w.opHostEnable}, {2, w.opMaintenance}, {3, w.opDrain}, {1, w.opHostRemove},
		{4, w.opRebalance}, {2, w.opSettings}, {3, w.opAgentDies}, {1, w.opRestart}, {4, w.opProbe}, {10, w.opIdle},
	}
	total := 0
	for _, c := range choices {
		total += c.weight
	}
	for {
		n := w.rng.IntN(total)
		for _, c := range choices {
			if n < c.weight {
				if o, ok := c.make(); ok {
					return o
				}
				break
			}
			n -= c.weight
		}
	}
}

func pickOne[T any](w *world, xs []T) T { return xs[w.rng.IntN(len(xs))] }

func (w *world) hostNames() []string {
	var out []string
	for _, v := range w.st.Hosts() {
		out = append(out, v.Host.Name)
	}
	return out
}

// deployed are the pool's services that exist, by name.
func (w *world) deployed() []string {
	var out []string
	for _, n := range servicesPool {
		if _, ok := w.st.Service(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// instances are every instance, in an order that does not depend on
// their random IDs where it can: service, host, generation, ID.
func (w *world) instances() []model.Instance {
	var out []model.Instance
	for _, v := range w.st.Instances("") {
		out = append(out, v.Instance)
	}
	slices.SortFunc(out, func(a, b model.Instance) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Host, b.Host), cmp.Compare(a.Generation, b.Generation), cmp.Compare(a.ID, b.ID))
	})
	return out
}

var constraints = []string{`zone == a`, `zone in (a, b)`, `ssd == true`, `rank >= 2`, `!(zone == c)`, `HostName != h01`, `ssd == true || rank < 2`}

func (w *world) rules(self string) state.Rules {
	var r state.Rules
	if w.rng.IntN(4) == 0 {
		r.Constraint = pickOne(w, constraints)
	}
	names := slices.DeleteFunc(slices.Clone(servicesPool), func(n string) bool { return n == self })
	if w.rng.IntN(7) == 0 {
		r.Affinity.Hard = []string{pickOne(w, names)}
	}
	if w.rng.IntN(6) == 0 {
		r.Affinity.Soft = []string{pickOne(w, names)}
	}
	if w.rng.IntN(6) == 0 {
		r.AntiAffinity.Hard = []string{pickOne(w, names)}
	}
	if w.rng.IntN(6) == 0 {
		r.AntiAffinity.Soft = []string{pickOne(w, names)}
	}
	switch w.rng.IntN(8) {
	case 0:
		r.Policy, r.HostsOrder = string(placement.NodesOrder), w.hostNames()
		w.rng.Shuffle(len(r.HostsOrder), func(i, j int) { r.HostsOrder[i], r.HostsOrder[j] = r.HostsOrder[j], r.HostsOrder[i] })
	case 1:
		r.Policy = string(placement.LoadAvg)
	case 2:
		r.Policy = string(placement.SpreadRank)
	}
	if w.rng.IntN(2) == 0 {
		r.DomainSpread = string(pickOne(w, []placement.Spread{placement.Adaptive, placement.MaxDifference, placement.QuorumSafe, placement.SpreadOff}))
	}
	return r
}

func (w *world) deployRequest(name string) service.DeployRequest {
	r := service.DeployRequest{Service: name, Spec: model.Spec{Image: "img:1"}, Count: 1 + w.rng.IntN(3), Strategy: pickOne(w, alloc.Strategies)}
	if r.Strategy == alloc.Each || r.Strategy == alloc.Fill {
		r.Count = 1 + w.rng.IntN(2)
	}
	r.Bind = w.rng.IntN(2) == 0
	if r.Bind {
		r.Pieces = pickOne(w, []int{25, 50, 100, 150, 200})
		r.WholeCores = r.Pieces%100 == 0 && w.rng.IntN(3) == 0
	} else {
		r.Pieces = 10 + 10*w.rng.IntN(15)
	}
	r.Memory = int64(1+w.rng.IntN(8)) * 256 * MiB
	if w.rng.IntN(4) == 0 {
		r.MemorySoft = r.Memory / 2
	}
	if w.rng.IntN(4) == 0 {
		r.MaxPerHost = 1 + w.rng.IntN(2)
	}
	r.UseBuffer = w.rng.IntN(8) == 0
	r.Rules = w.rules(name)
	switch w.rng.IntN(6) {
	case 0: // a static port from a small pool: services collide on it
		r.Spec.Ports = []model.Port{{Name: "http", Host: 8080 + w.rng.IntN(2)}}
	case 1:
		r.Spec.Ports = []model.Port{{Name: "http"}, {Name: "admin", Container: 9000}}
	}
	if w.rng.IntN(5) == 0 { // the commonest deploy: one instance, auto, no rules (the room index's)
		r.Count, r.Strategy, r.UseBuffer = 1, alloc.Auto, false
		r.Rules = state.Rules{DomainSpread: string(pickOne(w, []placement.Spread{"", placement.SpreadOff}))}
	}
	return r
}

func describe(r service.DeployRequest) string {
	s := fmt.Sprintf("%s count %d %s pieces %d bind %t whole %t memory %dMiB", r.Service, r.Count, r.Strategy, r.Pieces, r.Bind, r.WholeCores, r.Memory/MiB)
	if r.MaxPerHost > 0 {
		s += fmt.Sprintf(" max/host %d", r.MaxPerHost)
	}
	for _, p := range r.Spec.Ports {
		s += " port " + p.String()
	}
	if r.UseBuffer {
		s += " buffer"
	}
	rl := r.Rules
	if rl.Constraint != "" {
		s += fmt.Sprintf(" constraint %q", rl.Constraint)
	}
	if len(rl.Affinity.Hard)+len(rl.Affinity.Soft)+len(rl.AntiAffinity.Hard)+len(rl.AntiAffinity.Soft) > 0 {
		s += fmt.Sprintf(" affinity %v/%v anti %v/%v", rl.Affinity.Hard, rl.Affinity.Soft, rl.AntiAffinity.Hard, rl.AntiAffinity.Soft)
	}
	if rl.Policy != "" {
		s += " policy " + rl.Policy
	}
	if rl.DomainSpread != "" {
		s += " spread " + rl.DomainSpread
	}
	return s
}

func (w *world) opDeploy() (op, bool) {
	r := w.deployRequest(pickOne(w, servicesPool))
	return op{kind: "deploy", what: describe(r), run: func() error { _, err := w.svc.DeployWithRules(w.ctx, r); return err }}, true
}

// opDeployInvalid is a deploy with one invalid field: refused as invalid.
func (w *world) opDeployInvalid() (op, bool) {
	r := w.deployRequest(pickOne(w, servicesPool))
	var what string
	switch w.rng.IntN(8) {
	case 0:
		r.Memory, what = MiB, "memory 1MiB"
	case 1:
		r.Spec.Image, what = "", "no image"
	case 2:
		r.Strategy, what = "sideways", "strategy sideways"
	case 3:
		r.Rules.Constraint, what = "zone ==", "constraint 'zone =='"
	case 4:
		r.Count, what = service.MaxDeployCount+1, "count over the limit"
	case 5:
		r.Rules.DomainSpread, what = "sideways", "domain spread sideways"
	case 6:
		r.MemorySoft, what = r.Memory+1, "soft limit over memory"
	default:
		r.Service, what = "Bad Name", "service 'Bad Name'"
	}
	return op{kind: "deploy-invalid", what: what + ": " + describe(r), want: service.Invalid, invalid: true,
		run: func() error { _, err := w.svc.DeployWithRules(w.ctx, r); return err }}, true
}

// target is a deployed service or one instance; now and then (and
// always when there is no instance) a service scaled to 0, whose record
// alone a resize or replace changes.
func (w *world) target() (string, bool) {
	ins := w.instances()
	var empty []string
	for _, n := range w.deployed() {
		if !slices.ContainsFunc(ins, func(in model.Instance) bool { return in.Service == n }) {
			empty = append(empty, n)
		}
	}
	if len(empty) > 0 && (len(ins) == 0 || w.empty.IntN(4) == 0) {
		return empty[w.empty.IntN(len(empty))], true
	}
	if len(ins) == 0 {
		return "", false
	}
	if w.rng.IntN(2) == 0 {
		return pickOne(w, ins).Service, true
	}
	return pickOne(w, ins).ID, true
}

func (w *world) opResize() (op, bool) {
	t, ok := w.target()
	if !ok {
		return op{}, false
	}
	r := service.ResizeRequest{Target: t, CPUDelta: pickOne(w, []int{-50, -25, 0, 25, 50, 100}), MemoryDelta: pickOne(w, []int64{-256 * MiB, 0, 256 * MiB, 512 * MiB})}
	if w.rng.IntN(5) == 0 {
		b := w.rng.IntN(2) == 0
		r.Bind = &b
	}
	what := fmt.Sprintf("%s cpu %+d memory %+dMiB", t, r.CPUDelta, r.MemoryDelta/MiB)
	if w.sized.IntN(4) == 0 {
		r.CPUDelta, r.MemoryDelta = 0, 0
		r.To = &service.ResizeTo{Pieces: []int{0, 25, 50, 100, 150, 200}[w.sized.IntN(6)], Memory: []int64{256 * MiB, 512 * MiB, GiB}[w.sized.IntN(3)]}
		what = fmt.Sprintf("%s to %d pieces, %dMiB", t, r.To.Pieces, r.To.Memory/MiB)
	}
	if r.Bind != nil {
		what += fmt.Sprintf(" bind %t", *r.Bind)
	}
	return op{kind: "resize", what: what, run: func() error { _, err := w.svc.Resize(w.ctx, r); return err }}, true
}

func (w *world) opScale() (op, bool) {
	d := w.deployed()
	if len(d) == 0 {
		return op{}, false
	}
	name, n := pickOne(w, d), w.rng.IntN(6)
	return op{kind: "scale", what: fmt.Sprintf("%s to %d", name, n), run: func() error { _, err := w.svc.Scale(w.ctx, name, n); return err },
		never: service.Invalid}, true
}

func (w *world) opReplace() (op, bool) {
	t, ok := w.target()
	if !ok {
		return op{}, false
	}
	r := service.ReplaceRequest{Target: t, Image: fmt.Sprintf("img:%d", w.step), Pull: pickOne(w, []string{model.PullMissing, model.PullAlways})}
	if w.rng.IntN(8) == 0 {
		r.Hosts = []string{pickOne(w, w.hostNames())}
	}
	return op{kind: "replace", what: fmt.Sprintf("%s image %s hosts %v", t, r.Image, r.Hosts), run: func() error { _, err := w.svc.Replace(w.ctx, r); return err }}, true
}

func (w *world) opRemove() (op, bool) {
	t, ok := w.target()
	if !ok {
		return op{}, false
	}
	return op{kind: "remove", what: t, run: func() error { _, err := w.svc.Remove(w.ctx, t); return err }}, true
}

func (w *world) opMove() (op, bool) {
	ins := w.instances()
	if len(ins) == 0 {
		return op{}, false
	}
	in, to := pickOne(w, ins), ""
	if w.rng.IntN(2) == 0 {
		to = pickOne(w, w.hostNames())
	}
	return op{kind: "move", what: fmt.Sprintf("%s from %s to %q", in.ID, in.Host, to), run: func() error { _, err := w.svc.Move(w.ctx, in.ID, to); return err }}, true
}

func (w *world) opHostAdd() (op, bool) {
	if len(w.agents) >= maxHosts {
		return op{}, false
	}
	byAgent := w.rng.IntN(3) > 0
	return op{kind: "host-add", what: fmt.Sprintf("h%02d by agent %t", w.nextHost+1, byAgent), run: func() error { _, err := w.addHost(byAgent); return err }}, true
}

func (w *world) opHostSet() (op, bool) {
	name := pickOne(w, w.hostNames())
	v, _ := w.st.Host(name)
	r := service.SetHostRequest{Name: name}
	var what string
	switch w.rng.IntN(8) {
	case 0:
		r.SetProperties = map[string]placement.Value{"zone": placement.Str(pickOne(w, []string{"a", "b", "c"}))}
		what = "zone " + r.SetProperties["zone"].S
	case 1:
		r.SetProperties = map[string]placement.Value{"ssd": placement.BoolVal(w.rng.IntN(2) == 0), "rank": placement.IntVal(int64(w.rng.IntN(4)))}
		what = fmt.Sprintf("ssd %v rank %v", r.SetProperties["ssd"], r.SetProperties["rank"])
	case 2:
		fd := pickOne(w, []string{"", "fd:/dc1/r1", "fd:/dc1/r2", "fd:/dc2/r1"})
		ud := pickOne(w, []string{"", "u1", "u2", "u3"})
		r.FaultDomain, r.UpgradeDomain, what = &fd, &ud, fmt.Sprintf("fault domain %q upgrade domain %q", fd, ud)
	case 3:
		r.MemoryDelta = pickOne(w, []int64{-2 * GiB, -GiB, GiB, 2 * GiB})
		what = fmt.Sprintf("memory %+dGiB", r.MemoryDelta/GiB)
	case 4:
		ids := slices.Sorted(maps.Keys(v.Host.CPUs))
		if len(ids) == 0 {
			return op{}, false
		}
		id := pickOne(w, ids)
		r.RemoveCPUs = cpuset.Of(id)
		what = fmt.Sprintf("remove CPU %d", id)
	case 5:
		var missing []cpuset.CPUID
		for id := range v.Host.Topology.Online.All() {
			if _, ok := v.Host.CPUs[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return op{}, false
		}
		id := pickOne(w, missing)
		r.AddCPUs = map[cpuset.CPUID]int{id: shareBase}
		what = fmt.Sprintf("add CPU %d", id)
	case 6:
		r.RemoveProperties = []string{pickOne(w, []string{"zone", "ssd", "rank"})}
		what = "remove property " + r.RemoveProperties[0]
	default:
		r.SetProperties = map[string]placement.Value{"bad name": placement.Str("x")}
		return op{kind: "host-set-invalid", what: name + ": property 'bad name'", invalid: true, run: func() error { return w.setHost(r) }}, true
	}
	return op{kind: "host-set", what: name + ": " + what, run: func() error { return w.setHost(r) }}, true
}

// setHost applies r; a refusal that blames memory r does not change is a
// defect (found on seeds 4 and 8: a host above its memory after a heal with
// the overbooking refused every SetHost; fixed).
func (w *world) setHost(r service.SetHostRequest) error {
	_, err := w.svc.SetHost(w.ctx, r)
	if r.MemoryBytes == nil && r.MemoryDelta == 0 && len(r.NUMAMemory) == 0 && service.CodeOf(err) == service.Precond && strings.Contains(err.Error(), "in use") && strings.Contains(err.Error(), "memory") {
		w.fail("host set without a memory change refused for memory in use: %v", err)
	}
	return err
}

func (w *world) opHostEnable() (op, bool) {
	name, on := pickOne(w, w.hostNames()), w.rng.IntN(2) == 0
	kind := "host-disable"
	if on {
		kind = "host-enable"
	}
	return op{kind: kind, what: name, run: func() error { _, err := w.svc.SetEnabled(w.ctx, name, on); return err }}, true
}

func (w *world) opMaintenance() (op, bool) {
	name := pickOne(w, w.hostNames())
	grace := pickOne(w, []time.Duration{-1, -1, time.Minute, 10 * time.Minute, time.Hour})
	kind := "maintenance"
	if grace < 0 {
		kind = "maintenance-end"
	}
	return op{kind: kind, what: fmt.Sprintf("%s grace %s", name, grace), run: func() error { _, err := w.svc.SetMaintenance(w.ctx, name, grace); return err }}, true
}

func (w *world) opDrain() (op, bool) {
	name := pickOne(w, w.hostNames())
	if w.rng.IntN(4) == 0 {
		return op{kind: "drain-cancel", what: name, run: func() error { _, err := w.svc.Drain(w.ctx, name, 0, true, w.now); return err }}, true
	}
	deadline := pickOne(w, []time.Duration{0, 0, 2 * time.Minute, 10 * time.Minute})
	return op{kind: "drain", what: fmt.Sprintf("%s deadline %s", name, deadline), run: func() error { _, err := w.svc.Drain(w.ctx, name, deadline, false, w.now); return err }}, true
}

func (w *world) opHostRemove() (op, bool) {
	names := w.hostNames()
	if len(names) <= minHosts {
		return op{}, false
	}
	name := pickOne(w, names)
	return op{kind: "host-remove", what: name, run: func() error {
		_, err := w.svc.RemoveHost(w.ctx, name)
		if err == nil {
			if a, ok := w.agents[name]; ok && a.alive {
				w.kill(a) // the host is gone: its agent stops
			}
			delete(w.agents, name)
		}
		return err
	}}, true
}

func (w *world) opRebalance() (op, bool) {
	r := service.RebalanceRequest{Defragment: w.rng.IntN(3) == 0, Apply: w.rng.IntN(2) == 0}
	r.Options.MaxMoves = w.rng.IntN(5)
	kind := "rebalance-dry-run"
	if r.Apply {
		kind = "rebalance-apply"
	}
	if r.Defragment {
		kind += "+defragment"
	}
	return op{kind: kind, what: fmt.Sprintf("max moves %d", r.Options.MaxMoves), run: func() error { _, err := w.svc.Rebalance(w.ctx, r); return err }}, true
}

func (w *world) opSettings() (op, bool) {
	ps := placement.Settings{Overbooking: maps.Clone(w.overbook), Buffer: map[string]float64{}, Priorities: map[placement.Rule]placement.Priority{}}
	for _, res := range placement.Resources {
		if _, ok := ps.Overbooking[res]; !ok && w.rng.IntN(3) == 0 {
			ps.Buffer[res] = pickOne(w, []float64{0.1, 0.2, 0.3})
		}
	}
	ps.DownGrace = pickOne(w, []time.Duration{0, 30 * time.Second, 2 * time.Minute, 10 * time.Minute})
	for _, rule := range []placement.Rule{placement.RuleAffinity, placement.RuleFaultDomain, placement.RuleUpgradeDomain, placement.RulePlacementConstraint} {
		if w.rng.IntN(4) == 0 {
			ps.Priorities[rule] = pickOne(w, []placement.Priority{placement.Hard, placement.Soft, placement.Optimization})
		}
	}
	o := op{kind: "settings", what: fmt.Sprintf("%+v", ps)}
	if w.rng.IntN(6) == 0 {
		ps.DownGrace = time.Millisecond
		o = op{kind: "settings-invalid", what: "down grace 1ms", want: service.Invalid, invalid: true}
	}
	o.run = func() error { _, err := w.svc.SetPlacementSettings(w.ctx, ps); return err }
	return o, true
}

func (w *world) opAgentDies() (op, bool) {
	var alive []string
	for _, n := range slices.Sorted(maps.Keys(w.agents)) {
		if a := w.agents[n]; a.alive && a.joined {
			alive = append(alive, n)
		}
	}
	if len(alive) == 0 {
		return op{}, false
	}
	name := pickOne(w, alive)
	w.kill(w.agents[name])
	w.stats("agent-dies").Done++
	return op{kind: "agent-dies", what: fmt.Sprintf("%s (returns at step %d)", name, w.agents[name].returnAt)}, true
}

func (w *world) opRestart() (op, bool) {
	w.restart()
	w.stats("planner-restart").Done++
	return op{kind: "planner-restart", what: fmt.Sprintf("%d moves in flight, %d draining hosts", len(w.moving), len(w.draining))}, true
}

func (w *world) opIdle() (op, bool) { return op{kind: "idle", what: "time passes"}, true }

// opProbe checks that capacity is what a deploy places: Capacity's total
// of a random request deploys, and one more does not; the probe is then
// removed.
func (w *world) opProbe() (op, bool) {
	r := service.DeployRequest{Service: probe, Spec: model.Spec{Image: "img:probe"}, Bind: w.rng.IntN(2) == 0, Strategy: alloc.Auto}
	if r.Bind {
		r.Pieces = pickOne(w, []int{50, 100, 200})
		r.WholeCores = r.Pieces%100 == 0 && w.rng.IntN(4) == 0
	} else {
		r.Pieces = pickOne(w, []int{20, 50, 100})
	}
	r.Memory = pickOne(w, []int64{256 * MiB, GiB, 3 * GiB})
	if w.rng.IntN(3) == 0 {
		r.MaxPerHost = 1 + w.rng.IntN(2)
	}
	if w.rng.IntN(3) == 0 {
		r.Rules.Constraint = pickOne(w, constraints)
	}
	r.UseBuffer = w.rng.IntN(5) == 0
	// Capacity does not count the domain spread (placement.Capacity).
	r.Rules.DomainSpread = string(placement.SpreadOff)
	what := describe(r)
	rooms, err := w.svc.Capacity(r)
	if err != nil {
		w.fail("capacity of %s: %v", what, err)
	}
	total := 0
	for _, h := range slices.Sorted(maps.Keys(rooms)) {
		if n := rooms[h].Count; n < 0 {
			w.fail("capacity of %s: host %s takes %d (%s)", what, h, n, rooms[h].Limit)
		}
		total += rooms[h].Count
	}
	what = fmt.Sprintf("%s: capacity %d %v", what, total, rooms)
	w.stats("capacity-probe").Done++
	if total > maxProbe {
		return op{kind: "capacity-probe", what: what + " (too many to deploy)"}, true
	}
	w.res.Probes++
	w.note("capacity-probe: " + what)
	// The invariant: capacity is what one deploy places. A deploy of one
	// more than the total is refused and changes nothing; one of the total
	// is placed.
	over := r
	over.Count = total + 1
	before := w.snapshot()
	_, err = w.svc.DeployWithRules(w.ctx, over)
	if err == nil {
		w.fail("capacity says %d instances fit, and a deploy of %d was placed", total, total+1)
	}
	w.outcome(op{kind: "capacity-probe+1", want: service.Exhausted, invalid: true}, err, before)
	hostsBefore := map[string]string{}
	for _, v := range w.st.Hosts() {
		ah := state.AllocHost(v.Host, v.Alloc)
		ah.Topology = nil
		b, _ := json.Marshal(ah)
		hostsBefore[v.Host.Name] = fmt.Sprintf("%s (cpus %v numa %d)", b, v.Host.CPUs, len(v.Host.Topology.NUMANodes))
	}
	if total > 0 {
		r.Count = total
		if _, err := w.svc.DeployWithRules(w.ctx, r); err != nil {
			w.fail("capacity says %d instances fit, and a deploy of %d was refused: %v", total, total, err)
		}
	}
	// Then one more, in a deploy of its own: refused, as capacity counted
	// it, unless the host has two readings of its room (a bound request
	// with UseBuffer under CPU overbooking: the larger of the room with the
	// overbooking and without it, placement.Settings.rooms). One deploy
	// places on one reading; what it leaves may still fit in the other, so
	// a later deploy can place more there (docs/PLACEMENT.md, "Capacity").
	_, cpuOver := w.st.PlacementSettings().Overbooking["cpu"]
	twoReadings := r.UseBuffer && r.Bind && cpuOver
	more := r
	more.Count = 1
	before = w.snapshot()
	if res, err := w.svc.DeployWithRules(w.ctx, more); err == nil && !twoReadings {
		var hs []string
		for _, in := range res.Instances {
			hv, _ := w.st.Host(in.Host)
			hs = append(hs, fmt.Sprintf("%s on %s CPUs %v; host alloc %+v; before the deploy of the total: %s", in.ID, in.Host, in.CPUs, hv.Alloc, hostsBefore[in.Host]))
		}
		w.fail("capacity said %d instances fit (%s), the deploy of %d placed them, and one more in a deploy of its own was placed: %v",
			total, what, total, hs)
	} else if err != nil {
		w.outcome(op{kind: "capacity-probe+1", want: service.Exhausted, invalid: true}, err, before)
	}
	if total > 0 {
		if _, err := w.svc.Remove(w.ctx, probe); err != nil {
			w.fail("removing the probe: %v", err)
		}
	}
	return op{kind: "capacity-probe", what: what}, true
}
