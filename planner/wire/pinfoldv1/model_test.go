package pinfoldv1_test

import (
	"reflect"
	"strings"
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

// TestDeployRoundTrip: a deploy as wanted (model.Deploy) survives the
// wire both ways, through the deploy request and the service record
// (NewServiceRecord, ServiceRecord.Model),
// with every field of model.Deploy set (fill sets each; the guard below
// fails when a field is added that fill leaves unset, so a new option
// cannot miss its conversion unseen). Spec.Pull is not on the deploy
// request (a deploy always pulls a missing image), only on the record.
func TestDeployRoundTrip(t *testing.T) {
	var d model.Deploy
	n := fill(t, reflect.ValueOf(&d).Elem(), "Deploy")
	if n < 25 {
		t.Fatalf("fill set %d fields: the test checks too little", n)
	}
	d.Pull = model.PullAlways
	m := pinfoldv1.NewDeployRequest("web", 3, d, "1.5")
	if m.Service != "web" || m.Count != 3 || m.Cpu != "1.5" {
		t.Errorf("request: service %q count %d cpu %q", m.Service, m.Count, m.Cpu)
	}
	got := m.Model(d.Pieces)
	want := d
	want.Pull = "" // not on the request
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NewDeployRequest then Model (-want +got):\n%s", diff)
	}
	rec := pinfoldv1.NewServiceRecord("web", d, "1.5", 3, 100)
	back := rec.Model(d.Pieces)
	back.Pull = ""
	if diff := cmp.Diff(want, back); diff != "" || rec.Pull != model.PullAlways || rec.Count != 3 || rec.ShareBase != 100 {
		t.Errorf("NewServiceRecord lost a field (-want +got):\n%s (pull %q count %d share base %d)", diff, rec.Pull, rec.Count, rec.ShareBase)
	}
}

// fill sets every settable field under v to a value that is not its zero
// (strings named for their field, numbers 7, true, one-element slices and
// maps, new pointers), and returns how many leaf fields it set.
func fill(t *testing.T, v reflect.Value, name string) int {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		n := 0
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				n += fill(t, v.Field(i), f.Name)
			}
		}
		return n
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		return fill(t, v.Elem(), name)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		return fill(t, v.Index(0), name)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, name+"Key")
		fill(t, e, name)
		m.SetMapIndex(k, e)
		v.Set(m)
		return 1
	case reflect.String:
		v.SetString(strings.ToLower(name))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	default:
		t.Fatalf("fill: %s: kind %s not handled", name, v.Kind())
	}
	return 1
}

// TestContainerEditRoundTrip: every field of a replace's edit crosses the
// wire (a field the wire drops would be an edit silently not made).
func TestContainerEditRoundTrip(t *testing.T) {
	var e model.ContainerEdit
	if n := fill(t, reflect.ValueOf(&e).Elem(), "ContainerEdit"); n != 15 {
		t.Fatalf("fill set %d fields of ContainerEdit, want 15: a new field needs the wire (NewContainerEdit, Model)", n)
	}
	if diff := cmp.Diff(e, pinfoldv1.NewContainerEdit(e).Model()); diff != "" {
		t.Errorf("NewContainerEdit then Model (-want +got):\n%s", diff)
	}
	if m := pinfoldv1.NewContainerEdit(model.ContainerEdit{}); m != nil {
		t.Errorf("an edit naming nothing: %v on the wire, want none", m)
	}
}
