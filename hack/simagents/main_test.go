package main

import (
	"strings"
	"testing"
)

// TestReportPrint: after -phases registration the table shows only what
// that phase measured (it printed the steady phase, the deploys and a
// planner restart "after 0.0 s" as if measured); a full run shows every row.
func TestReportPrint(t *testing.T) {
	for _, tc := range []struct {
		phases       string
		want, absent []string
	}{
		{"registration", []string{"registration ", "memory (RSS)", "etcd 38 MiB", "-phases registration: no steady phase"}, []string{"steady phase  ", "deploy → agent notified", "planner restart", "more per deploy"}},
		{"all", []string{"registration ", "steady phase  ", "deploy → agent notified", "memory (RSS)", "more per deploy", "planner restart"}, []string{"-phases registration"}},
	} {
		t.Run(tc.phases, func(t *testing.T) {
			var b strings.Builder
			report{Phases: tc.phases, Agents: 50, EtcdRSSMiB: 38}.print(&b)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("table lacks %q:\n%s", w, b.String())
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(b.String(), a) {
					t.Errorf("table has %q:\n%s", a, b.String())
				}
			}
		})
	}
}
