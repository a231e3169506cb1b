package model

import (
	"encoding/json"
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
