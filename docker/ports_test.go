package docker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/cpuset"
)

// TestCreatePublishesPorts: a container's ports are exposed and bound to
// their host ports (TCP, every host address); under network host nothing
// is published; a port out of range is refused naming it.
func TestCreatePublishesPorts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake()
	a, err := newAdapter(ctx, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := Resources{CPUs: cpuset.MustParseCPUs("0"), Mems: cpuset.MustParseMems("0"), MemoryBytes: 64 << 20}
	spec := CreateSpec{Name: "web-1", Image: "img", Service: "web", Instance: "web-1", Resources: res,
		Ports: []PortMapping{{Host: 20000, Container: 80}, {Host: 8443, Container: 8443}}}
	for _, tc := range []struct {
		network string
		want    string // the bindings as the engine API's JSON carries them
	}{
		{"", `{"80/tcp":[{"HostIp":"","HostPort":"20000"}],"8443/tcp":[{"HostIp":"","HostPort":"8443"}]}`},
		{"bridge", `{"80/tcp":[{"HostIp":"","HostPort":"20000"}],"8443/tcp":[{"HostIp":"","HostPort":"8443"}]}`},
		{"host", `null`},
	} {
		t.Run("network "+tc.network, func(t *testing.T) {
			s := spec
			s.Network = tc.network
			id, err := a.Create(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			c := f.containers[id]
			b, _ := json.Marshal(c.HostConfig.PortBindings)
			if string(b) != tc.want {
				t.Errorf("port bindings %s, want %s", b, tc.want)
			}
			if got := len(c.Config.ExposedPorts); tc.network != "host" && got != 2 || tc.network == "host" && got != 0 {
				t.Errorf("exposed ports %v", c.Config.ExposedPorts)
			}
		})
	}
	s := spec
	s.Ports = []PortMapping{{Host: 70000, Container: 80}}
	if _, err := a.Create(ctx, s); err == nil || !strings.Contains(err.Error(), "70000:80") {
		t.Errorf("port 70000: %v, want refused naming it", err)
	}
}
