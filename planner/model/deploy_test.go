package model

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestParsePriority: a class's name or an integer in range; anything
// else is refused naming the key and what is wanted.
func TestParsePriority(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Priority
		ok   bool
	}{
		{"system", PrioritySystem, true}, {"production", 0, true}, {"batch", PriorityBatch, true}, {"best-effort", PriorityBestEffort, true},
		{" 250 ", 250, true}, {"-100000", MinPriority, true}, {"100000", MaxPriority, true},
		{"100001", 0, false}, {"urgent", 0, false}, {"", 0, false}, {"1.5", 0, false}, {"Batch", 0, false},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePriority(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("ParsePriority(%q) = %v, %v; want %v, ok %t", tt.in, got, err, tt.want, tt.ok)
			}
			if err != nil {
				if fe, isField := err.(*FieldError); !isField || fe.Key != "priority" {
					t.Errorf("error %v does not name the key priority", err)
				}
			}
		})
	}
	var s Scheduling
	if err := json.Unmarshal([]byte(`{"priority":"best-effort","max_per_host":2}`), &s); err != nil || s.Priority != PriorityBestEffort {
		t.Errorf("priority by name: %+v, %v", s, err)
	}
	if err := json.Unmarshal([]byte(`{"priority":-200}`), &s); err != nil || s.Priority != -200 {
		t.Errorf("priority by number: %+v, %v", s, err)
	}
	if b, _ := json.Marshal(Scheduling{Strategy: "auto"}); string(b) != `{"strategy":"auto","max_per_host":0}` {
		t.Errorf("a production priority is written %s: want it left out, as records before it", b)
	}
	// A record is read whatever it holds (a reader stricter than the
	// writer drops the record): the range is Validate's.
	s = Scheduling{Priority: 7}
	if err := json.Unmarshal([]byte(`{"priority":100001}`), &s); err != nil || s.Priority != 100001 {
		t.Errorf("a stored priority out of range: %+v, %v; want it read", s, err)
	}
	if err := json.Unmarshal([]byte(`{"priority":null}`), &s); err != nil || s.Priority != 100001 {
		t.Errorf("priority null: %+v, %v; want it left as it was", s, err)
	}
	if err := (Scheduling{Priority: MaxPriority + 1}).Validate(); err == nil {
		t.Errorf("Validate took a priority out of range")
	}
}

// TestNeverPreemptedValidate: never_preempted only for a priority of
// production or higher; below, refused naming the key, its value and the
// priority.
func TestNeverPreemptedValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    Scheduling
		ok   bool
	}{
		{"system", Scheduling{Priority: PrioritySystem, NeverPreempted: true}, true},
		{"production", Scheduling{NeverPreempted: true}, true},
		{"just-below-production", Scheduling{Priority: -1, NeverPreempted: true}, false},
		{"batch", Scheduling{Priority: PriorityBatch, NeverPreempted: true}, false},
		{"best-effort", Scheduling{Priority: PriorityBestEffort, NeverPreempted: true}, false},
		{"best-effort-preemptible", Scheduling{Priority: PriorityBestEffort}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate(%+v) = %v; want ok %t", tt.s, err, tt.ok)
			}
			if err == nil {
				return
			}
			fe, isField := err.(*FieldError)
			if !isField || fe.Key != "never_preempted" || fe.Value != "true" || !strings.Contains(fe.Why, tt.s.Priority.String()) {
				t.Errorf("Validate(%+v) = %v; want key never_preempted, value true and the priority %s named", tt.s, err, tt.s.Priority)
			}
		})
	}
	if b, _ := json.Marshal(Scheduling{Strategy: "auto"}); strings.Contains(string(b), "never_preempted") {
		t.Errorf("a service that may be preempted is written %s: want the key left out, as records before it", b)
	}
	var s Scheduling
	if err := json.Unmarshal([]byte(`{"never_preempted":true,"priority":"system"}`), &s); err != nil || !s.NeverPreempted {
		t.Errorf("never_preempted read: %+v, %v", s, err)
	}
}
