package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// reader is what planning a change reads: the store's cache with the
// changes planned before it in the same commit group laid over it
// (state.Pending).
type reader interface {
	SchedulablePlacement() *state.Placed
	Unschedulable() map[string][]string
	Host(name string) (state.HostView, bool)
	Instance(id string) (state.InstanceView, bool)
	Instances(host string) []state.InstanceView
	ServiceInstances(service string) []state.InstanceView
	Replacements(id string) []state.InstanceView
	Service(name string) (state.Doc[state.Service], bool)
	PlacementSettings() placement.Settings
	Request(id string) (state.Request, bool)
}

// planFunc plans one request's change against r; it runs on the
// pipeline's goroutine, once per attempt, and must not write anywhere but
// its own result variables. It returns state.ErrConflict when what it read
// changed while it planned (the cache moved on): it is then run again.
type planFunc func(r reader) (*state.Change, error)

// pipeline commits the changes of concurrent requests in groups, as
// Nomad's plan queue and applier do: requests queue in arrival order; one
// goroutine plans them one after another against the cache plus the
// changes planned before them in the group, merges the changes and commits
// the group in one guarded etcd transaction (one fsync), then answers each
// request on its own. Requests of one planner never conflict with each
// other, so a large batch is not starved by small ones: it is planned in
// its turn, alone in its group when it is large. Only a write from outside
// the pipeline (another planner, a host registration) can make a group's
// commit fail; the group is then planned again from the fresh cache, up to
// maxAttempts times.
//
// The goroutine runs only while there is work (the first request into an
// empty queue starts it), so an idle planner holds none.
type pipeline struct {
	st Store

	mu      sync.Mutex
	queue   []*job
	running bool

	// panicked records a recovered panic and returns it as the error of
	// the requests it touched (Service.Panicked).
	panicked func(where string, v any) error

	// stamp, when set, readies an event for writing (Service.stamp): a
	// request whose context carries an Audit commits its call's event
	// with its change.
	stamp func(state.Event) state.Event

	// wrap, when set (tests), wraps what the plan functions read.
	wrap func(reader) reader
	// limit is the most writes a group holds: groupOps, halved each time
	// etcd refuses a group as too large (an external cluster may keep
	// etcd's default of 128 writes per transaction). Only the pipeline's
	// goroutine uses it.
	limit int
}

type job struct {
	ctx  context.Context
	plan planFunc
	done chan error // buffered: the pipeline never blocks on a caller
}

// groupOps bounds the writes of one group: requests are added while the
// merged change has fewer (a single larger request commits alone). A
// group etcd refuses as too large lowers the bound (pipeline.limit).
const groupOps = 4096

// commitTimeout bounds one group's commit and the wait for the cache.
const commitTimeout = 30 * time.Second

// do queues plan and waits for its group's outcome: nil once its change
// committed and the cache reflects it, its plan's error, or the commit's.
func (p *pipeline) do(ctx context.Context, plan planFunc) error {
	return p.doAll(ctx, []planFunc{plan})[0]
}

// doAll queues plans together, so that they share commit groups, and waits
// for each one's outcome (do's), in the order of plans.
func (p *pipeline) doAll(ctx context.Context, plans []planFunc) []error {
	jobs := make([]*job, len(plans))
	p.mu.Lock()
	for i, plan := range plans {
		jobs[i] = &job{ctx: ctx, plan: plan, done: make(chan error, 1)}
		p.queue = append(p.queue, jobs[i])
	}
	start := !p.running
	p.running = true
	p.mu.Unlock()
	if start {
		go p.run()
	}
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		select {
		case errs[i] = <-j.done:
		case <-ctx.Done():
			// The request may still commit (as a cancelled transaction
			// may); the pipeline skips it if it has not been planned yet.
			errs[i] = ctx.Err()
		}
	}
	return errs
}

func (p *pipeline) run() {
	for {
		p.mu.Lock()
		batch := p.queue
		p.queue = nil
		if len(batch) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		for len(batch) > 0 {
			batch = p.safeGroup(batch)
		}
	}
}

// safeGroup is group, recovering a panic outside the plan functions (in
// merging or committing): every request of batch not answered yet gets the
// internal error, which says the outcome is unknown (the commit may have
// been made), and the pipeline goes on with the next requests.
func (p *pipeline) safeGroup(batch []*job) (rest []*job) {
	defer func() {
		if v := recover(); v != nil {
			err := p.panic("commit pipeline: committing", v)
			for _, j := range batch {
				select {
				case j.done <- err:
				default: // answered already
				}
			}
			rest = nil
		}
	}()
	return p.group(batch)
}

// panic records v through panicked (an error, when unset: tests).
func (p *pipeline) panic(where string, v any) error {
	if p.panicked == nil {
		return &PanicError{Where: where, Value: v}
	}
	return p.panicked(where, v)
}

// plan runs j's plan function against rd; a panic in it is that request's
// internal error only.
func (p *pipeline) plan(j *job, rd reader) (c *state.Change, err error) {
	defer func() {
		if v := recover(); v != nil {
			c, err = nil, p.panic("commit pipeline: planning a request", v)
		}
	}()
	return j.plan(rd)
}

// group plans a prefix of batch into one commit, commits it (planning it
// again after a conflict), answers its requests and returns the rest.
func (p *pipeline) group(batch []*job) []*job {
	in := batch
	var rest []*job // planned when this group is done
	for attempt := 1; ; attempt++ {
		pend := p.st.Pending()
		var rd reader = pend
		if p.wrap != nil {
			rd = p.wrap(pend)
		}
		var live []*job
		audits := map[*Audit]bool{} // the calls whose event this group writes
		for i, j := range in {
			if err := j.ctx.Err(); err != nil {
				j.done <- err
				continue
			}
			c, err := p.plan(j, rd)
			for k := 1; errors.Is(err, state.ErrConflict) && k < maxAttempts; k++ {
				c, err = p.plan(j, rd)
			}
			if errors.Is(err, state.ErrConflict) {
				err = errf(Conflicted, "gave up after %d conflicting attempts; the hosts are changing too fast", maxAttempts)
			}
			if err != nil || c.Len() == 0 {
				j.done <- err // an error, or nothing to write
				continue
			}
			if p.limit == 0 {
				p.limit = groupOps
			}
			if len(live) > 0 && pend.Change().Len()+c.Len() > p.limit {
				rest = append(in[i:len(in):len(in)], rest...)
				break
			}
			// Leader work (heal, drain, settling moves) commits only while
			// this planner leads: a planner that lost it in a freeze cannot.
			c.GuardLeader(state.LeaderOf(j.ctx))
			// The call's event goes with its first change (a call of
			// several requests, a heal, writes it once).
			if a := auditOf(j.ctx); a != nil && p.stamp != nil && !a.Committed() && !audits[a] {
				c.PutEvent(p.stamp(a.Full()))
				audits[a] = true
			}
			pend.Add(c)
			live = append(live, j)
		}
		if len(live) == 0 {
			return rest
		}
		hit("commit")
		ctx, cancel := context.WithTimeout(context.WithoutCancel(live[0].ctx), commitTimeout)
		_, err := p.st.Commit(ctx, pend.Change())
		cancel()
		if err == nil {
			for a := range audits {
				a.committed.Store(true)
			}
		}
		if errors.Is(err, state.ErrConflict) && attempt < maxAttempts {
			in = live
			continue
		}
		if errors.Is(err, state.ErrTooLarge) && len(live) > 1 {
			// Smaller groups; the requests are planned again, none lost.
			p.limit = max(pend.Change().Len()/2, 1)
			in = live
			continue
		}
		switch {
		case errors.Is(err, state.ErrConflict):
			err = errf(Conflicted, "gave up after %d conflicting attempts; the hosts are changing too fast", maxAttempts)
		case errors.Is(err, state.ErrTooLarge):
			err = errf(Invalid, "this request is one etcd transaction, and etcd refused it as too large (%w); ask for fewer instances at once, or raise the etcd cluster's --max-txn-ops and --max-request-bytes", err)
		}
		for _, j := range live {
			j.done <- err
		}
		return rest
	}
}
