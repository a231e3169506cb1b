package service

import (
	"testing"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/state"
)

// memStore is an in-memory store (state.Memory, held to the etcd-backed
// store's contract by state's contract tests) with the planner config cfg,
// closed at the end of the test: for tests of the service's own behaviour.
func memStore(t testing.TB, cfg state.Config) *state.Memory {
	t.Helper()
	st, err := state.NewMemory(cfg, model.Protocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}
