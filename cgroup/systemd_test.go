//go:build linux

package cgroup

import (
	"context"
	"strings"
	"testing"
)

func TestSlicePath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"pinfold.slice":     "pinfold.slice",
		"pinfold-web.slice": "pinfold.slice/pinfold-web.slice",
		"a-b-c.slice":       "a.slice/a-b.slice/a-b-c.slice",
		"-.slice":           "",
	} {
		if got := slicePath(in); got != want {
			t.Errorf("slicePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScopeProperties(t *testing.T) {
	t.Parallel()
	got := map[string]string{}
	for _, p := range scopeProperties("pinfold.slice", 42) {
		got[p.Name] = p.Value.String()
	}
	want := map[string]string{"Slice": `"pinfold.slice"`, "Delegate": "true", "PIDs": "@au [42]", "DefaultDependencies": "false"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("property %s = %s, want %s (all: %v)", k, got[k], v, got)
		}
	}
}

func TestSystemdScopeRejectsBadNames(t *testing.T) {
	t.Parallel()
	for _, tt := range [][2]string{{"../x.slice", "a.scope"}, {"pinfold.slice", "a.service"}, {"pinfold.scope", "a.scope"}} {
		if _, err := SystemdScope(context.Background(), tt[0], tt[1], 1); err == nil || !strings.Contains(err.Error(), "cgroup: systemd") {
			t.Errorf("SystemdScope(%q, %q) = %v, want a name error before any D-Bus call", tt[0], tt[1], err)
		}
	}
}
