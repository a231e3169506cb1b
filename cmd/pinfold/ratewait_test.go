package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestRateRefusalRetried: a call the planner refused for its identity's
// rate (refused before it was read, so nothing changed) is sent again
// after a pause, until the rate allows it (issue 36: apply -f of 2,300
// services failed on its own calls). Control: another resource_exhausted
// refusal (a full host) is not retried.
func TestRateRefusalRetried(t *testing.T) {
	rate := connect.NewError(connect.CodeResourceExhausted, errors.New("identity admin:alice called more than 200 times a second: at most 200 a second per identity after a burst of 400 (--identity-rate, --identity-burst); slow down"))
	full := connect.NewError(connect.CodeResourceExhausted, errors.New("need 1 instance of web--identity-rate, the hosts can take 0"))
	for _, tc := range []struct {
		name           string
		fail           error
		refusals, sent int
		wantErr        bool
		wantSleeps     int
	}{
		{"rate, then served", rate, 5, 6, false, 5},
		{"rate, never served", rate, 1000, len(rateWaits) + 1, true, len(rateWaits)},
		{"control: a full host", full, 1, 1, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var slept []time.Duration
			l := &callLog{sleep: func(d time.Duration) { slept = append(slept, d) }}
			sent := 0
			call := l.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
				sent++
				if sent <= tc.refusals {
					return nil, tc.fail
				}
				return connect.NewResponse(&pinfoldv1.DeployResponse{}), nil
			})
			_, err := call(context.Background(), connect.NewRequest(&pinfoldv1.DeployRequest{}))
			if (err != nil) != tc.wantErr || sent != tc.sent || len(slept) != tc.wantSleeps {
				t.Errorf("err %v, sent %d, slept %d times; want error %v, sent %d, %d pauses", err, sent, len(slept), tc.wantErr, tc.sent, tc.wantSleeps)
			}
			var total time.Duration
			for _, d := range slept {
				total += d
			}
			if total > 70*time.Second {
				t.Errorf("paused %s in all: want about a minute at most", total)
			}
		})
	}
}
