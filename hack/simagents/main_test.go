package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestReportPrint: after -phases registration the table shows only what
// that phase measured (it printed the steady phase, the deploys and a
// planner restart "after 0.0 s" as if measured); a full run shows every row.
func TestReportPrint(t *testing.T) {
	for _, tc := range []struct {
		phases       string
		want, absent []string
	}{
		{"registration", []string{"registration ", "memory (RSS)", "etcd 38 MiB", "-phases registration: no steady phase"}, []string{"steady phase  ", "deploy → agent notified", "planner restart", "more per deploy", "etcd writes"}},
		{"all", []string{"registration ", "steady phase  ", "deploy → agent notified", "memory (RSS)", "more per deploy", "planner restart", "etcd writes a minute"}, []string{"-phases registration"}},
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

// TestEtcdWrites: the steady phase's etcd write figures are read from
// etcd's /metrics text (the figures named exactly, not their
// look-alikes) and given per minute.
func TestEtcdWrites(t *testing.T) {
	rev := 100.0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# HELP etcd_debugging_mvcc_current_revision The current revision of store.\n"+
			"etcd_debugging_mvcc_current_revision %g\netcd_debugging_mvcc_current_revision_other 9e9\n"+
			"etcd_server_proposals_committed_total %g\netcd_debugging_lease_granted_total %g\n", rev, rev+50, rev/10)
	}))
	defer srv.Close()
	before := etcdWrites(srv.URL)
	rev = 400
	var r report
	r.etcdRates(before, etcdWrites(srv.URL), 2*time.Minute, "agent")
	if r.EtcdRevisionsPerMinute != 150 || r.EtcdRaftEntriesPerMinute != 150 || r.EtcdLeaseGrantsPerMinute != 15 || r.Metrics != "agent" {
		t.Errorf("figures over 2 minutes of 300 revisions and 30 grants = %+v, want 150 revisions, 150 raft entries and 15 grants a minute", r)
	}
}
