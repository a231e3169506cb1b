package pinfoldv1_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestRoundTrip: the domain model survives the wire, quotas as pieces.
func TestRoundTrip(t *testing.T) {
	for _, in := range []model.Instance{
		{ID: "web-1", Service: "web", Host: "h1", Generation: 4, RolledBack: "refused",
			Spec: model.Spec{Image: "img:2", Command: []string{"sleep", "9"}, Env: []string{"A=1"}, Network: "host",
				Health: &model.HealthCheck{HTTP: "8080/healthz", Timeout: "5s"}},
			Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{0: 100, 3: 70}, NUMANode: 1, Memory: 1 << 30, MemorySoft: 1 << 29}},
		{ID: "db-1", Service: "db", Host: "h3", Generation: 2, SpecGeneration: 2,
			Spec: model.Spec{Image: "postgres:16", Container: model.Container{Volumes: []string{"/srv/db:/var/lib/postgresql/data", "conf:/etc/pg:ro"},
				Restart: "on-failure:3", Labels: map[string]string{"team": "data", "tier": ""}, User: "999:999", Workdir: "/var/lib/postgresql",
				ReadOnly: true, CapAdd: []string{"NET_ADMIN"}, CapDrop: []string{"ALL"}, LogDriver: "json-file", LogOpts: map[string]string{"max-size": "10m"}}},
			Allocation: model.Allocation{CPUs: map[cpuset.CPUID]int{}, CPUQuota: 100, NUMANode: -1, Memory: 1 << 30}},
		{ID: "p-1", Service: "p", Host: "h1", Generation: 2,
			Spec: model.Spec{Image: "busybox", Ports: []model.Port{{Name: "http", Host: 8080, Container: 80}, {Name: "admin"}},
				Health: &model.HealthCheck{HTTP: "/healthz", Port: "http"}},
			Allocation: model.Allocation{CPUs: map[cpuset.CPUID]int{}, CPUQuota: 50, NUMANode: -1, Memory: 64 << 20,
				HostPorts: []model.Port{{Name: "http", Host: 8080, Container: 80}, {Name: "admin", Host: 20000, Container: 20000}}}},
		{ID: "m-1", Service: "m", Host: "h2", Generation: 1, Spec: model.Spec{Image: "busybox"},
			Allocation: model.Allocation{CPUs: map[cpuset.CPUID]int{}, CPUQuota: 1995, NUMANode: -1, Memory: 64 << 20}},
	} {
		m := pinfoldv1.NewInstance(in, nil, "pending", 1000)
		if m.CpuQuotaPieces != int32(in.CPUQuota) || m.ShareBase != 1000 {
			t.Errorf("%s: quota on the wire %d of %d, want %d of 1000", in.ID, m.CpuQuotaPieces, m.ShareBase, in.CPUQuota)
		}
		if diff := cmp.Diff(in, m.Model()); diff != "" {
			t.Errorf("%s: round trip (-want +got):\n%s", in.ID, diff)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatalf("%s: marshal: %v", in.ID, err)
		}
		var back pinfoldv1.Instance
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: unmarshal: %v", in.ID, err)
		}
		if diff := cmp.Diff(in, back.Model()); diff != "" {
			t.Errorf("%s: round trip through the encoding (-want +got):\n%s", in.ID, diff)
		}
	}
	st := model.Status{State: "running", ContainerID: "c1", PID: 42, Generation: 3, Error: "e", Refused: 3, MemoryCurrent: 5 << 20, CPUGot: 168,
		Applied: &model.Applied{CPUs: "0,3", Mems: "1", CPUQuota: 170000, CPUWeight: 70, MemoryBytes: 1 << 30}}
	if diff := cmp.Diff(st, pinfoldv1.NewReportStatusRequest("h1", "web-1", st).Status()); diff != "" {
		t.Errorf("status round trip (-want +got):\n%s", diff)
	}
}
