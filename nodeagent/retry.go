package nodeagent

import (
	"fmt"
	"time"
)

// MaxRetryBackoff caps the wait before an action that keeps failing on an
// instance (a create whose image cannot be pulled, say) is tried again.
const MaxRetryBackoff = time.Minute

// retry is what the agent remembers of an instance's failing action: the
// action (its kind and the instance's generation), how many times in a row
// it failed, when it may be tried again, and the error last logged.
type retry struct {
	key    string
	fails  int
	at     time.Time
	logged string
}

// retryKey names an action for its backoff: a new generation (the planner
// changed the instance) or another kind of action starts afresh.
func retryKey(act Action) string {
	return fmt.Sprintf("%s/%d/%d", act.Kind, act.Instance.Generation, act.Instance.SpecGeneration)
}

// retryWait is the wait after fails failures in a row: the resync period,
// doubled with each further failure, at most MaxRetryBackoff.
func retryWait(resync time.Duration, fails int) time.Duration {
	d := resync
	for i := 1; i < fails && d < MaxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, MaxRetryBackoff)
}

// waiting reports whether act waits out its instance's backoff at now.
func (a *Agent) waiting(act Action, now time.Time) bool {
	if act.Instance == nil || act.Kind == Reassert {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.records[act.Instance.ID]
	return r != nil && r.retry.key == retryKey(act) && now.Before(r.retry.at)
}

// outcome logs an action's result and keeps its instance's backoff: a
// success at INFO (and how many failures it ended), a failure at WARN
// once per instance and error, again only when the error changes (DEBUG
// in between), with the wait before the next try.
func (a *Agent) outcome(act Action, err error, took time.Duration, now time.Time) {
	id := ""
	if act.Instance != nil {
		id = act.Instance.ID
	}
	attrs := []any{"action", act.Kind, "instance", id, "container_id", short(act.Container), "reason", act.Reason, "took", took.Round(time.Millisecond)}
	if act.Instance == nil || act.Kind == Reassert {
		a.log.Info("applied", append(attrs, "err", err)...)
		return
	}
	a.mu.Lock()
	r := a.recordLocked(id)
	key := retryKey(act)
	if err == nil {
		fails := 0
		if r.retry.key == key {
			fails = r.retry.fails
		}
		r.retry = retry{}
		a.mu.Unlock()
		if fails > 0 {
			attrs = append(attrs, "after_failures", fails)
		}
		a.log.Info("applied", attrs...)
		return
	}
	if r.retry.key != key {
		r.retry = retry{key: key}
	}
	r.retry.fails++
	wait := retryWait(a.cfg.Resync, r.retry.fails)
	r.retry.at = now.Add(wait)
	first := r.retry.logged != err.Error()
	r.retry.logged = err.Error()
	fails := r.retry.fails
	a.mu.Unlock()
	attrs = append(attrs, "err", err, "failures", fails, "retry_in", wait)
	if first {
		a.log.Warn("action failed: retried with backoff", attrs...)
	} else {
		a.log.Debug("action failed again", attrs...)
	}
}
