package api

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/service"
)

func TestPieces(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		neg     bool
		want    int
		wantErr string
	}{
		{"1.7", false, 170, ""}, {"0.29", false, 29, ""}, {"", false, 0, ""}, {" 2 ", false, 200, ""},
		{"-0.5", true, -50, ""}, {"-0.5", false, 0, "must not be negative"},
		{"1.5.3", false, 0, "not a decimal"}, {"NaN", false, 0, "want a number of CPUs"}, {"1e9", false, 0, "want a number of CPUs"},
	} {
		got, err := pieces("cpu", tt.in, 100, tt.neg)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("pieces(%q) error = %v, want invalid argument %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("pieces(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestToConnect(t *testing.T) {
	t.Parallel()
	for code, want := range map[service.Code]connect.Code{
		service.Invalid: connect.CodeInvalidArgument, service.NotFound: connect.CodeNotFound, service.Exists: connect.CodeAlreadyExists,
		service.Precond: connect.CodeFailedPrecondition, service.Exhausted: connect.CodeResourceExhausted, service.Conflicted: connect.CodeAborted,
	} {
		if got := connect.CodeOf(toConnect(&service.Error{Code: code, Message: "m"})); got != want {
			t.Errorf("toConnect(%s) = %s, want %s", code, got, want)
		}
	}
	if got := connect.CodeOf(toConnect(errors.New("boom"))); got != connect.CodeInternal {
		t.Errorf("internal error mapped to %s", got)
	}
}
