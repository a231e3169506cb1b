package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/api"
)

// TestPlannerBoundsFlags: the timeouts and per-identity limits the
// planner's flags give, 0 a limit's "no bound"; out-of-range values are
// bad input naming the flag and the value.
func TestPlannerBoundsFlags(t *testing.T) {
	for _, tt := range []struct {
		name    string
		f       plannerFlags
		want    api.Limits
		wantErr string
	}{
		{"defaults", plannerFlags{identityMaxConns: 64, identityRate: 200, identityBurst: 2000}, api.Limits{ConnsPerIdentity: 64, RatePerIdentity: 200, BurstPerIdentity: 2000}, ""},
		{"no bounds", plannerFlags{}, api.Limits{ConnsPerIdentity: -1, RatePerIdentity: -1, BurstPerIdentity: -1}, ""},
		{"negative conns", plannerFlags{identityMaxConns: -1}, api.Limits{}, "--identity-max-conns -1"},
		{"rate without burst", plannerFlags{identityRate: 5}, api.Limits{}, "--identity-rate 5 with --identity-burst 0"},
		{"negative rate", plannerFlags{identityRate: -2, identityBurst: 4}, api.Limits{}, "--identity-rate -2"},
		{"negative body timeout", plannerFlags{bodyTimeout: -time.Second}, api.Limits{}, "--body-timeout -1s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := tt.f.bounds()
			var ee *exitError
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("bounds() = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ee) || ee.code != exitBadInput):
				t.Fatalf("bounds() = %v, want bad input naming %q", err, tt.wantErr)
			case tt.wantErr == "" && got != tt.want:
				t.Fatalf("bounds() = %+v, want %+v", got, tt.want)
			}
		})
	}
}
