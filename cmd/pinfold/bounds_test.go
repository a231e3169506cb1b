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
		// Past a typo's reach: every connection dropped, or a certificate
		// (an admin's too) waiting days for its next call.
		{"header timeout of a nanosecond", plannerFlags{headerTimeout: time.Nanosecond}, api.Limits{}, "--header-timeout 1ns: want 0 (the default) or 1s..24h"},
		{"idle timeout of 15 ms", plannerFlags{idleTimeout: 15 * time.Millisecond}, api.Limits{}, "--idle-timeout 15ms"},
		{"a call a week", plannerFlags{identityRate: 1.0 / (7 * 24 * 3600), identityBurst: 10}, api.Limits{}, "--identity-rate 1.6534391534391535e-06: want 0 (no bound) or 1..1000000"},
		{"timeouts of a second, a call a second", plannerFlags{headerTimeout: time.Second, bodyTimeout: time.Second, idleTimeout: time.Second, identityRate: 1, identityBurst: 1},
			api.Limits{ConnsPerIdentity: -1, RatePerIdentity: 1, BurstPerIdentity: 1}, ""},
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
