package model

import (
	"slices"
	"strings"
	"testing"
)

func TestParsePort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Port
		err  string
	}{
		{"http", Port{Name: "http"}, ""},
		{"http:80", Port{Name: "http", Container: 80}, ""},
		{"http=8080", Port{Name: "http", Host: 8080}, ""},
		{"http=8080:80", Port{Name: "http", Host: 8080, Container: 80}, ""},
		{"http=70000", Port{}, `port "http=70000": port 70000 is outside 1-65535`},
		{"http=0", Port{}, `port "http=0": port 0 is outside 1-65535`},
		{"http:x", Port{}, `port "http:x": container port "x" is not a number`},
		{"http=", Port{}, `port "http=": host port "" is not a number`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParsePort(tc.in)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("ParsePort(%q) = %v, %v; want error %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || got.String() != tc.in {
				t.Errorf("ParsePort(%q) = %+v (%s), %v; want %+v", tc.in, got, got, err, tc.want)
			}
		})
	}
}

func TestPortEnv(t *testing.T) {
	for in, want := range map[string]string{"http": "PINFOLD_PORT_HTTP", "http-alt": "PINFOLD_PORT_HTTP_ALT", "a_b9": "PINFOLD_PORT_A_B9"} {
		if got := PortEnv(in); got != want {
			t.Errorf("PortEnv(%q) = %q, want %q", in, got, want)
		}
	}
	if got := PortsEnv([]Port{{Name: "http", Host: 20000, Container: 80}}); !slices.Equal(got, []string{"PINFOLD_PORT_HTTP=20000"}) {
		t.Errorf("PortsEnv = %q: the host port, not the container's", got)
	}
}

// TestAssignPorts: dynamic ports are the lowest free of the range, skip
// static ones asked in it, and run out at its end.
func TestAssignPorts(t *testing.T) {
	held := map[int]bool{DynamicPortMin: true, DynamicPortMin + 2: true}
	got, ok := AssignPorts([]Port{{Name: "a"}, {Name: "s", Host: DynamicPortMin + 1}, {Name: "b", Container: 80}}, func(p int) bool { return held[p] })
	want := []Port{{Name: "a", Host: DynamicPortMin + 3, Container: DynamicPortMin + 3}, {Name: "s", Host: DynamicPortMin + 1, Container: DynamicPortMin + 1},
		{Name: "b", Host: DynamicPortMin + 4, Container: 80}}
	if !ok || !slices.Equal(got, want) {
		t.Errorf("AssignPorts = %v, %t; want %v", got, ok, want)
	}
	if _, ok := AssignPorts([]Port{{Name: "a"}}, func(p int) bool { return p != DynamicPortMax+1 }); ok {
		t.Errorf("AssignPorts found a port in a full range")
	}
}

func TestValidatePorts(t *testing.T) {
	for _, tc := range []struct {
		ports   []Port
		network string
		err     string
	}{
		{[]Port{{Name: "http"}, {Name: "web", Host: 80, Container: 8080}}, "", ""},
		{[]Port{{Name: "web", Host: 80}}, "host", ""},
		{[]Port{{Name: "web", Host: 80, Container: 8080}}, "host", "under network host"},
		{[]Port{{Name: "http", Container: 80}}, "host", "which is dynamic"},
		{[]Port{{Name: "-x"}}, "", `name "-x"`},
		{[]Port{{Name: strings.Repeat("a", 33)}}, "", "at most 32 characters"},
		{[]Port{{Name: "a", Container: 70000}}, "", "container port 70000 is outside 1-65535"},
		// Two names, one variable in the container (found by a trial).
		{[]Port{{Name: "a-b"}, {Name: "a_b"}}, "", `reaches the container as PINFOLD_PORT_A_B, as port "a-b" does`},
	} {
		err := ValidatePorts(tc.ports, tc.network)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ValidatePorts(%v, %q) = %v, want %q", tc.ports, tc.network, err, tc.err)
		}
	}
}
