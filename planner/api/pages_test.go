package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/planfile"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// pagePlanner is a planner over embedded etcd (fsync off) served on an
// httptest server, and a client of it.
func pagePlanner(t testing.TB) (pinfoldv1connect.PlannerServiceClient, *service.Service, *state.Store) {
	t.Helper()
	c := statetest.Start(t, 1, func(e *state.EmbedConfig) { e.UnsafeNoFsync = true })
	st := c.Open(t, state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol)
	svc := service.New(st, nil)
	srv := httptest.NewServer(api.Handler(svc, api.Options{}))
	t.Cleanup(srv.Close)
	return pinfoldv1connect.NewPlannerServiceClient(srv.Client(), srv.URL), svc, st
}

// registerHosts registers the named hosts (laptops), 16 at a time.
func registerHosts(t testing.TB, svc *service.Service, names ...string) {
	t.Helper()
	topo := topologytest.Laptop().Topology()
	var wg sync.WaitGroup
	next := make(chan string)
	errs := make(chan error, len(names))
	for range 16 {
		wg.Go(func() {
			for name := range next {
				if _, err := svc.RegisterHost(context.Background(), service.RegisterHostRequest{Name: name, Topology: topo,
					Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
					errs <- fmt.Errorf("register %s: %w", name, err)
				}
			}
		})
	}
	for _, n := range names {
		next <- n
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func hostNames(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%05d", prefix, i))
	}
	return out
}

// walkHosts lists every page of hosts of pageSize, calling between(page)
// after each page but the last; it returns the names in the order listed
// and the pages' sizes.
func walkHosts(t *testing.T, cl pinfoldv1connect.PlannerServiceClient, pageSize int32, between func(page int)) ([]string, []int) {
	t.Helper()
	var names []string
	var sizes []int
	req := &pinfoldv1.ListHostsRequest{PageSize: pageSize}
	for page := 0; ; page++ {
		resp, err := cl.ListHosts(context.Background(), connect.NewRequest(req))
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		sizes = append(sizes, len(resp.Msg.Hosts))
		for _, h := range resp.Msg.Hosts {
			names = append(names, h.Name)
		}
		if resp.Msg.NextPageToken == "" {
			return names, sizes
		}
		if page > 1000 {
			t.Fatal("more than 1000 pages")
		}
		req.PageToken = resp.Msg.NextPageToken
		if between != nil {
			between(page)
		}
	}
}

// TestListHostsPages: ListHosts answers page_size hosts at a time, sorted
// by name, each host once, the last page with no next token; a request
// without page fields gets the first 500 and a token.
func TestListHostsPages(t *testing.T) {
	cl, svc, _ := pagePlanner(t)
	all := hostNames("h", 0, 23)
	registerHosts(t, svc, all...)
	for _, tt := range []struct {
		size  int32
		sizes []int
	}{
		{5, []int{5, 5, 5, 5, 3}},
		{1, slices.Repeat([]int{1}, 23)},
		{23, []int{23}},
		{22, []int{22, 1}},
		{5000, []int{23}},
		{0, []int{23}},
	} {
		t.Run(fmt.Sprint(tt.size), func(t *testing.T) {
			names, sizes := walkHosts(t, cl, tt.size, nil)
			if !slices.Equal(names, all) {
				t.Errorf("listed %v, want %v", names, all)
			}
			if !slices.Equal(sizes, tt.sizes) {
				t.Errorf("page sizes %v, want %v", sizes, tt.sizes)
			}
		})
	}
}

// TestListHostsPagesUnderChange: hosts added and removed between pages,
// the host the token names included, make no other host repeat or go
// missing; one added after the walk's position is listed, one before is
// not.
func TestListHostsPagesUnderChange(t *testing.T) {
	cl, svc, _ := pagePlanner(t)
	registerHosts(t, svc, hostNames("h", 0, 20)...)
	ctx := context.Background()
	names, _ := walkHosts(t, cl, 5, func(page int) {
		if page != 0 {
			return
		}
		// Listed so far: h00000-h00004.
		for _, h := range []string{"h00002", "h00004", "h00005", "h00010"} {
			if _, err := svc.RemoveHost(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		registerHosts(t, svc, "h00003a", "h00015a", "h00099")
	})
	want := []string{"h00000", "h00001", "h00002", "h00003", "h00004"}
	for _, h := range append(hostNames("h", 6, 20), "h00015a", "h00099") {
		if h != "h00010" {
			want = append(want, h)
		}
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("listed %v,\nwant %v", names, want)
	}
}

// TestListInstancesPages: ListInstances pages, with and without a host or
// service filter, list exactly what the one-call listing did, in its order
// (host, then ID); an instance removed between pages (the one the token
// names too) makes no other repeat or go missing.
func TestListInstancesPages(t *testing.T) {
	cl, svc, _ := pagePlanner(t)
	registerHosts(t, svc, "h1", "h2", "h3", "h4")
	ctx := context.Background()
	for svcName, n := range map[string]int{"a": 9, "b": 5} {
		if _, err := svc.Deploy(ctx, service.DeployRequest{Service: svcName, Count: n, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 10, Memory: 64 << 20}}}); err != nil {
			t.Fatal(err)
		}
	}
	registerHosts(t, svc, "h9") // it gets instances only between pages
	ids := func(ins []state.InstanceView) []string {
		var out []string
		for _, iv := range ins {
			out = append(out, iv.Instance.Host+"/"+iv.Instance.ID)
		}
		return out
	}
	walk := func(t *testing.T, host, service string, size int32, between func(page int, last *pinfoldv1.Instance)) []string {
		t.Helper()
		var out []string
		req := &pinfoldv1.ListInstancesRequest{Host: host, Service: service, PageSize: size}
		for page := 0; ; page++ {
			resp, err := cl.ListInstances(ctx, connect.NewRequest(req))
			if err != nil {
				t.Fatalf("page %d: %v", page, err)
			}
			if len(resp.Msg.Instances) > int(size) {
				t.Errorf("page %d: %d instances, want at most %d", page, len(resp.Msg.Instances), size)
			}
			for _, in := range resp.Msg.Instances {
				out = append(out, in.Host+"/"+in.Id)
			}
			if resp.Msg.NextPageToken == "" || page > 100 {
				return out
			}
			req.PageToken = resp.Msg.NextPageToken
			if between != nil {
				between(page, resp.Msg.Instances[len(resp.Msg.Instances)-1])
			}
		}
	}
	for _, f := range []struct{ host, service string }{{"", ""}, {"h2", ""}, {"", "a"}, {"", "b"}, {"h3", "b"}, {"h9", ""}, {"", "none"}} {
		want := ids(svc.Instances(f.host, f.service))
		for _, size := range []int32{1, 2, 3, 5, 14} {
			t.Run(fmt.Sprintf("%s/%s/%d", f.host, f.service, size), func(t *testing.T) {
				if got := walk(t, f.host, f.service, size, nil); !slices.Equal(got, want) {
					t.Errorf("listed %v,\nwant %v", got, want)
				}
			})
		}
	}
	ref := func(k string) state.InstanceRef {
		h, id, _ := strings.Cut(k, "/")
		return state.InstanceRef{Host: h, ID: id}
	}
	for _, filter := range []string{"", "a"} {
		t.Run("deployed and removed between pages/"+filter, func(t *testing.T) {
			var cursor string // the last key listed before the change
			var after []string
			got := walk(t, "", filter, 2, func(page int, last *pinfoldv1.Instance) {
				if page != 0 {
					return
				}
				cursor = last.Host + "/" + last.Id
				if _, err := svc.Deploy(ctx, service.DeployRequest{Service: "a", Count: 6, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 10, Memory: 64 << 20}}}); err != nil {
					t.Fatal(err)
				}
				if filter == "" {
					// A host's first instance: h9 joins the hosts listed.
					res, err := svc.DeployWithRules(ctx, service.DeployRequest{Service: "c", Count: 1, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Rules: model.Rules{Policy: "nodes_order", HostsOrder: []string{"h9"}}, Size: model.Size{Pieces: 10, Memory: 64 << 20}}})
					if err != nil || len(res.Instances) != 1 || res.Instances[0].Host != "h9" {
						t.Fatalf("deploy on h9: %+v, %v", res, err)
					}
				}
				now := ids(svc.Instances("h4", filter)) // h9's first instance stays
				gone := strings.SplitN(now[len(now)-1], "/", 2)[1]
				if _, err := svc.Remove(ctx, gone); err != nil {
					t.Fatal(err)
				}
				for _, k := range ids(svc.Instances("", filter)) {
					if ref(k).Compare(ref(cursor)) > 0 {
						after = append(after, k)
					}
				}
			})
			i := slices.Index(got, cursor)
			if i < 0 || !slices.Equal(got[i+1:], after) {
				t.Errorf("after %s listed %v,\nwant %v", cursor, got[i+1:], after)
			}
		})
	}
	t.Run("removed between pages", func(t *testing.T) {
		before := ids(svc.Instances("", ""))
		if len(before) < 8 {
			t.Fatalf("%d instances, want 8 or more", len(before))
		}
		gone := map[string]bool{}
		got := walk(t, "", "", 3, func(page int, last *pinfoldv1.Instance) {
			if page != 0 {
				return
			}
			// The token's own instance, and one further on.
			for _, id := range []string{last.Id, strings.SplitN(before[7], "/", 2)[1]} {
				if _, err := svc.Remove(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			gone[before[7]] = true
		})
		var want []string
		for _, k := range before {
			if !gone[k] {
				want = append(want, k)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("listed %v,\nwant %v", got, want)
		}
	})
}

// TestListPageErrors: a page size out of range or a token that is not one
// of the listing's is refused, naming the field and the value.
func TestListPageErrors(t *testing.T) {
	cl, svc, _ := pagePlanner(t)
	registerHosts(t, svc, "h1", "h2", "h3")
	ctx := context.Background()
	if _, err := svc.Deploy(ctx, service.DeployRequest{Service: "a", Count: 3, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 10, Memory: 64 << 20}}}); err != nil {
		t.Fatal(err)
	}
	hp, err := cl.ListHosts(ctx, connect.NewRequest(&pinfoldv1.ListHostsRequest{PageSize: 1}))
	if err != nil || hp.Msg.NextPageToken == "" {
		t.Fatalf("ListHosts: %v, %v", hp, err)
	}
	ip, err := cl.ListInstances(ctx, connect.NewRequest(&pinfoldv1.ListInstancesRequest{PageSize: 1}))
	if err != nil || ip.Msg.NextPageToken == "" {
		t.Fatalf("ListInstances: %v, %v", ip, err)
	}
	hostTok, insTok := hp.Msg.NextPageToken, ip.Msg.NextPageToken
	long := strings.Repeat("A", 2000)
	for _, tt := range []struct {
		name string
		call func() error
		want string
	}{
		{"hosts negative", func() error {
			_, err := cl.ListHosts(ctx, connect.NewRequest(&pinfoldv1.ListHostsRequest{PageSize: -1}))
			return err
		}, "page_size = -1: want 0 (the default, 500) to 5000"},
		{"hosts too large", func() error {
			_, err := cl.ListHosts(ctx, connect.NewRequest(&pinfoldv1.ListHostsRequest{PageSize: 5001}))
			return err
		}, "page_size = 5001: want 0 (the default, 500) to 5000"},
		{"instances too large", func() error {
			_, err := cl.ListInstances(ctx, connect.NewRequest(&pinfoldv1.ListInstancesRequest{PageSize: 1 << 30}))
			return err
		}, "page_size = 1073741824: want 0 (the default, 500) to 5000"},
		{"hosts not base64", func() error {
			_, err := cl.ListHosts(ctx, connect.NewRequest(&pinfoldv1.ListHostsRequest{PageToken: "h1!"}))
			return err
		}, `page_token = "h1!": not a page token`},
		{"hosts with an instances token", func() error {
			_, err := cl.ListHosts(ctx, connect.NewRequest(&pinfoldv1.ListHostsRequest{PageToken: insTok}))
			return err
		}, fmt.Sprintf("page_token = %q: not a page token of this listing", insTok)},
		{"instances with a hosts token", func() error {
			_, err := cl.ListInstances(ctx, connect.NewRequest(&pinfoldv1.ListInstancesRequest{PageToken: hostTok}))
			return err
		}, fmt.Sprintf("page_token = %q: not a page token of this listing", hostTok)},
		{"instances with another filter's token", func() error {
			_, err := cl.ListInstances(ctx, connect.NewRequest(&pinfoldv1.ListInstancesRequest{Service: "a", PageToken: insTok}))
			return err
		}, fmt.Sprintf("page_token = %q: not a page token of this listing", insTok)},
		{"instances with another host's token", func() error {
			_, err := cl.ListInstances(ctx, connect.NewRequest(&pinfoldv1.ListInstancesRequest{Host: "h2", PageToken: insTok}))
			return err
		}, fmt.Sprintf("page_token = %q: not a page token of this listing", insTok)},
		{"instances token too long", func() error {
			_, err := cl.ListInstances(ctx, connect.NewRequest(&pinfoldv1.ListInstancesRequest{PageToken: long}))
			return err
		}, "page_token = \"AAAA"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want invalid argument %q", err, tt.want)
			}
		})
	}
}

// TestListHostsPageMemoryFlat: one ListHosts call (the default page, 500
// hosts) allocates about as much at 10,000 hosts as at 1,000 (client and
// server, in this process): the page, not the cluster. Before pages, one
// call answered every host, 10 times more at 10,000.
func TestListHostsPageMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("registers 10,000 hosts")
	}
	cl, svc, _ := pagePlanner(t)
	ctx := context.Background()
	perCall := func(n int) (bytes, allocs float64) {
		t.Helper()
		call := func() {
			resp, err := cl.ListHosts(ctx, connect.NewRequest(&pinfoldv1.ListHostsRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Msg.Hosts) != service.DefaultPageSize || resp.Msg.NextPageToken == "" {
				t.Fatalf("%d hosts: the first page has %d hosts, next token %q; want %d and a token", n, len(resp.Msg.Hosts), resp.Msg.NextPageToken, service.DefaultPageSize)
			}
		}
		call() // the sorted index is built by the first call after hosts were added
		const runs = 10
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			call()
		}
		runtime.ReadMemStats(&after)
		return float64(after.TotalAlloc-before.TotalAlloc) / runs, float64(after.Mallocs-before.Mallocs) / runs
	}
	registerHosts(t, svc, hostNames("host-", 0, 1000)...)
	b1k, a1k := perCall(1000)
	registerHosts(t, svc, hostNames("host-", 1000, 10000)...)
	b10k, a10k := perCall(10000)
	t.Logf("one ListHosts call (first page, %d hosts): 1,000 hosts %.0f KiB %.0f allocs; 10,000 hosts %.0f KiB %.0f allocs",
		service.DefaultPageSize, b1k/1024, a1k, b10k/1024, a10k)
	if b10k > 2*b1k {
		t.Errorf("one page allocates %.0f KiB at 10,000 hosts, over twice the %.0f KiB at 1,000: it grows with the cluster", b10k/1024, b1k/1024)
	}
}

// TestExportPlanStream: ExportPlan streams the plan file in pieces of
// about service.ExportPieceBytes that concatenated are byte for byte the
// file the one-message export answered (json.Marshal of planfile.Export).
func TestExportPlanStream(t *testing.T) {
	cl, svc, st := pagePlanner(t)
	ctx := context.Background()
	export := func() ([]byte, []int) {
		t.Helper()
		stream, err := cl.ExportPlan(ctx, connect.NewRequest(&pinfoldv1.ExportPlanRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		var file []byte
		var sizes []int
		for stream.Receive() {
			file = append(file, stream.Msg().PlanJson...)
			sizes = append(sizes, len(stream.Msg().PlanJson))
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		return file, sizes
	}
	whole := func() []byte {
		b, err := json.Marshal(planfile.Export(svc.Params(), st.PlacementSettings(), st.SchedulablePlacement().Hosts))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// No hosts: one piece, hosts null as before.
	if got, sizes := export(); string(got) != string(whole()) || len(sizes) != 1 {
		t.Errorf("no hosts: %d pieces %s, want one: %s", len(sizes), got, whole())
	}
	registerHosts(t, svc, hostNames("h", 0, 300)...)
	if _, err := svc.SetPlacementSettings(ctx, placement.Settings{Buffer: map[string]float64{"cpu": 0.1},
		Overbooking: map[string]float64{"memory": 0.25}, Priorities: map[placement.Rule]placement.Priority{placement.RuleAffinity: placement.Soft}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Deploy(ctx, service.DeployRequest{Service: "a", Count: 40, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 150, Bind: true, Memory: 1 << 30}}}); err != nil {
		t.Fatal(err)
	}
	got, sizes := export()
	want := whole()
	if string(got) != string(want) {
		t.Fatalf("the streamed file (%d bytes) differs from the one-message export (%d bytes)", len(got), len(want))
	}
	if len(sizes) < 2 {
		t.Errorf("a %d-byte file came in %d piece(s), want pieces of about %d bytes", len(got), len(sizes), service.ExportPieceBytes)
	}
	for i, n := range sizes {
		if n > service.ExportPieceBytes+64<<10 {
			t.Errorf("piece %d: %d bytes, want about %d at most", i, n, service.ExportPieceBytes)
		}
	}
	t.Logf("300 hosts: a %d-byte plan file in %d pieces", len(got), len(sizes))
}

// BenchmarkListHostsPage: one ListHosts call (the default page, 500 of
// them) at 1,000 and at 10,000 registered hosts (laptops), client and
// server in this process: the page's cost, not the cluster's.
func BenchmarkListHostsPage(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			cl, svc, _ := pagePlanner(b)
			registerHosts(b, svc, hostNames("host-", 0, n)...)
			call := func() {
				resp, err := cl.ListHosts(context.Background(), connect.NewRequest(&pinfoldv1.ListHostsRequest{}))
				if err != nil || len(resp.Msg.Hosts) != service.DefaultPageSize {
					b.Fatalf("ListHosts: %v", err)
				}
			}
			call()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				call()
			}
		})
	}
}

// BenchmarkExportPlan10k: ExportPlan of 10,000 schedulable hosts
// (laptops), streamed; reports the file's size and its largest piece.
func BenchmarkExportPlan10k(b *testing.B) {
	cl, svc, _ := pagePlanner(b)
	registerHosts(b, svc, hostNames("host-", 0, 10000)...)
	var size, largest int
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		stream, err := cl.ExportPlan(context.Background(), connect.NewRequest(&pinfoldv1.ExportPlanRequest{}))
		if err != nil {
			b.Fatal(err)
		}
		size = 0
		for stream.Receive() {
			size += len(stream.Msg().PlanJson)
			largest = max(largest, len(stream.Msg().PlanJson))
		}
		if err := stream.Err(); err != nil {
			b.Fatal(err)
		}
		stream.Close()
	}
	b.ReportMetric(float64(size)/(1<<20), "MiB-file")
	b.ReportMetric(float64(largest)/(1<<10), "KiB-largest-piece")
}
