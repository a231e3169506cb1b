package state

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
)

// scanReplacements is what Replacements answered before its index: every
// instance of the service whose Replaces is id, sorted by host then ID.
func scanReplacements(all []InstanceView, id string) []string {
	var out []string
	for _, v := range all {
		if v.Instance.Replaces == id {
			out = append(out, v.Instance.Host+"/"+v.Instance.ID)
		}
	}
	return out
}

func refs(vs []InstanceView) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Instance.Host+"/"+v.Instance.ID)
	}
	return out
}

// TestReplacementsIsTheScan: the replacement index (the cache's, and
// Pending's over it) answers what a scan of the service's instances does,
// through moves started, finished, aborted and rewritten, committed and
// pending. Control: without the cache's unindex of a replacement, or
// without Pending's own index, or with Pending not reading a candidate
// again, the answers differ from the scan.
func TestReplacementsIsTheScan(t *testing.T) {
	m, err := NewMemory(Config{ShareBase: 100}, model.Protocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	in := func(host, id, replaces string) model.Instance {
		return model.Instance{ID: id, Service: "web", Host: host, Replaces: replaces, Generation: 1}
	}
	commit := func(c *Change) {
		t.Helper()
		if _, err := m.Commit(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	ids := []string{"web-a", "web-x", "web-b1", "web-none"}
	check := func(t *testing.T, what string, rd interface {
		ServiceInstances(string) []InstanceView
		Replacements(string) []InstanceView
	}) {
		t.Helper()
		all := rd.ServiceInstances("web")
		for _, id := range ids {
			if got, want := refs(rd.Replacements(id)), scanReplacements(all, id); !slices.Equal(got, want) {
				t.Errorf("%s: replacements of %s = %v, the scan finds %v", what, id, got, want)
			}
		}
	}
	steps := []struct {
		name  string
		build func(c *Change)
	}{
		{"moves started", func(c *Change) {
			c.PutInstance(in("h1", "web-a", ""))
			c.PutInstance(in("h2", "web-b1", "web-a"))
			c.PutInstance(in("h1", "web-b2", "web-a"))
			c.PutInstance(in("h3", "web-c", "web-x"))
		}},
		{"one finished, one aborted", func(c *Change) {
			c.PutInstance(in("h2", "web-b1", ""))
			c.DeleteInstance("h3", "web-c")
		}},
		{"one moved on", func(c *Change) {
			c.DeleteInstance("h1", "web-b2")
			c.PutInstance(in("h4", "web-b2", "web-b1"))
		}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			var c Change
			st.build(&c)
			commit(&c)
			check(t, "committed", m)
			p := m.Pending()
			for i, b := range []func(c *Change){
				func(c *Change) { c.PutInstance(in("h5", "web-d", "web-a")) },
				func(c *Change) { c.PutInstance(in("h6", "web-e", "web-x")) },
				func(c *Change) { c.PutInstance(in("h6", "web-e", "")) },
				func(c *Change) { c.DeleteInstance("h2", "web-b1") },
				func(c *Change) { c.PutInstance(in("h1", "web-b2", "web-a")) },
			} {
				var pc Change
				b(&pc)
				p.Add(&pc)
				check(t, fmt.Sprintf("pending write %d", i), p)
			}
		})
	}
}
