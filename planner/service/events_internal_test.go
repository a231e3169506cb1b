package service

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner/state"
)

// TestRecordBoundsEveryField: an event is cut to its bounds where it is
// recorded, field by field, before it waits in the queue (60 refused calls
// with 4 MB names took the planner to 2.1 GB, issue 26 N1); and a batch of
// such events, written whole by a caller that did not cut them, still
// fits in one etcd transaction.
func TestRecordBoundsEveryField(t *testing.T) {
	f := newHealFixture(t)
	huge := strings.Repeat("é", 2<<20) // 4 MB, two bytes a rune
	for _, tt := range []struct {
		field string
		max   int
	}{
		{"Identity", state.MaxEventField}, {"Kind", state.MaxEventField}, {"Subject", state.MaxEventField},
		{"Host", state.MaxEventField}, {"Service", state.MaxEventField},
		{"Request", state.MaxEventText}, {"Outcome", state.MaxEventText},
	} {
		t.Run(tt.field, func(t *testing.T) {
			var ev state.Event
			reflect.ValueOf(&ev).Elem().FieldByName(tt.field).SetString(huge)
			f.Record(ev)
			got := (<-f.ev.ch)
			v := reflect.ValueOf(got).FieldByName(tt.field).String()
			if len(v) > tt.max || !strings.HasSuffix(v, "…") || !strings.HasPrefix(v, "éé") {
				t.Errorf("%s queued with %d bytes (%.20q…), want at most %d ending in …", tt.field, len(v), v, tt.max)
			}
			if !strings.Contains(v[:len(v)-len("…")], "é") || strings.ContainsRune(v, '\uFFFD') {
				t.Errorf("%s cut inside a rune", tt.field)
			}
		})
	}
	t.Run("a batch written whole", func(t *testing.T) {
		big := huge[:64<<10] // 100 events × 3 such fields: 19 MB whole
		evs := make([]state.Event, state.MaxEventsPerCommit)
		for i := range evs {
			evs[i] = state.Event{ID: f.st.NewEventID(time.Now(), int64(i)), Identity: "viewer:v", Kind: "Deploy",
				Subject: big, Host: big, Service: big, Request: big, Outcome: big}
		}
		if err := f.st.PutEvents(f.ctx, evs); err != nil {
			t.Fatalf("PutEvents(%d events with 64 KB fields) = %.300v", len(evs), err)
		}
		got, err := f.Events(f.ctx, EventQuery{})
		if err != nil || len(got) != len(evs) {
			t.Fatalf("Events() = %d, %v; want %d", len(got), err, len(evs))
		}
		if len(got[0].Subject) > state.MaxEventField || len(got[0].Request) > state.MaxEventText {
			t.Errorf("stored subject %d bytes, request %d bytes", len(got[0].Subject), len(got[0].Request))
		}
	})
}
