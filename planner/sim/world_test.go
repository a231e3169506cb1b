package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
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
	// Overbooked counts the drains' moves onto a host they took past its
	// nominal capacity (each checked: no host had nominal room for it).
	Overbooked int
	// Pruned counts the services prunes removed, PruneKept those of
	// another project or by hand a prune left (each checked: checkPruned).
	Pruned, PruneKept int
	// Indexed counts the deploys the room index placed, IndexedMoves
	// the moves and heals (each checked against the full plan:
	// Service.CheckIndex).
	Indexed, IndexedMoves int64
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
	sized *rand.Rand
	// preempting draws the preempt step and its request (opPreempt), so
	// that the other operations' draws stay as they were.
	preempting *rand.Rand
	step       int
	stepNow    atomic.Int64
	now        time.Time
	ctx        context.Context

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
	priority map[string]model.Priority // a service's priority since its record appeared
	pre      *state.Placed             // the schedulable hosts before the step
}

func newWorld(t testing.TB, cfg Config) *world {
	if cfg.VerifyEvery <= 0 {
		cfg.VerifyEvery = 1
	}
	w := &world{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		empty:      rand.New(rand.NewPCG(cfg.Seed^0x5bd1e995, cfg.Seed)),
		sized:      rand.New(rand.NewPCG(cfg.Seed^0x27d4eb2f, cfg.Seed)),
		preempting: rand.New(rand.NewPCG(cfg.Seed^0x85ebca6b, cfg.Seed)),
		// SetMaintenance reads the real clock: the simulated one starts
		// there (and runs ahead, a few seconds a step).
		now: time.Now().UTC().Truncate(time.Second), ctx: context.Background(),
		agents: map[string]*agent{}, reports: map[string]report{}, moving: map[string]int{}, draining: map[string]int{}, priority: map[string]model.Priority{},
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

// restart closes the planner (store and service) and opens it again over
// the same etcd: the new leader's memory starts empty.
func (w *world) restart() {
	w.res.Indexed += w.svc.IndexAnswers()
	w.res.IndexedMoves += w.svc.IndexMoves()
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
	w.res.IndexedMoves += w.svc.IndexMoves()
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
	// The hosts as placement saw them before the step (a cached list the
	// store does not change): the nominal-first check reads them.
	w.pre = w.st.SchedulablePlacement()
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
