package service_test

import (
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
)

// Both stores give the service what it needs (state's contract tests hold
// them to the same answers).
var (
	_ service.Store = (*state.Store)(nil)
	_ service.Store = (*state.Memory)(nil)
)
