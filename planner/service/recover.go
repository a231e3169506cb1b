package service

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"github.com/pinfold/pinfold/planner/state"
)

// No panic stops the planner. Every goroutine that runs a request or a
// background step recovers: the commit pipeline per planned request and
// per commit group, the leader's tick, audit and event pruning, and the
// API's handlers and streams (api.Handler, through Panicked). A panic
// becomes an internal error for that request or step only: its stack goes
// to the log, an InternalError event is recorded, the count (Panics) is a
// metric, and the planner keeps serving. A persisted operation (a drain, a
// heal) whose step keeps failing or panicking is parked (tracker.fail):
// retried at a long interval, with its reason on the host.

// PanicError is a recovered panic: an internal error of the planner.
type PanicError struct {
	// Where is what was running: "commit pipeline: planning", "leader tick", a method name.
	Where string
	Value any
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("internal error of the planner in %s: %v (logged with its stack; the planner keeps serving)", e.Where, e.Value)
}

// Panicked records a recovered panic v that stopped where (its stack is
// taken here, so call it from the deferred recover) and returns it as an
// error.
func (s *Service) Panicked(where string, v any) error {
	stack := debug.Stack()
	s.panics.Add(1)
	s.log.Error("internal error recovered; the planner keeps serving", "where", where, "panic", fmt.Sprint(v), "stack", string(stack))
	s.Record(state.Event{Identity: "planner", Kind: "InternalError", Subject: where, Outcome: clip(fmt.Sprint(v))})
	return &PanicError{Where: where, Value: v}
}

// Panics is the number of panics recovered since the planner started.
func (s *Service) Panics() int64 { return s.panics.Load() }

// safely runs step, a background step of the leader, and turns a panic in
// it into an error (recorded by Panicked).
func (s *Service) safely(where string, step func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = s.Panicked(where, v)
		}
	}()
	step()
	return nil
}

// failpoint, set by tests only, is called with each step kind's name as
// the step starts: "deploy", "heal", "move", "settle" (plan functions),
// "commit" (a commit group), "tick", "audit" and "events" (the leader's
// and the event writer's steps). A test makes it panic to prove the step
// recovers.
var failpoint atomic.Pointer[func(step string)]

func hit(step string) {
	if f := failpoint.Load(); f != nil {
		(*f)(step)
	}
}
