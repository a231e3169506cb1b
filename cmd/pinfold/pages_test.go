package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// TestCLIWalksPages: with more hosts and instances than one page (500),
// host list, ps and plan export still show every one of them, once, in
// order: the CLI follows next_page_token to the end.
func TestCLIWalksPages(t *testing.T) {
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	tj, err := os.ReadFile(laptopTopology)
	if err != nil {
		t.Fatal(err)
	}
	cl := pinfoldv1connect.NewPlannerServiceClient(http.DefaultClient, "http://"+addr)
	ctx := context.Background()
	const hosts, instances = 620, 1050
	var want []string
	next := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for name := range next {
				if _, err := cl.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: name, TopologyJson: tj, MemoryShare: 1})); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range hosts {
		name := fmt.Sprintf("h%04d", i)
		want = append(want, name)
		next <- name
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	pf.Must("deploy", "web", "--count", fmt.Sprint(instances), "--cpu", "0.01", "--memory", "8MiB", "--image", "i")

	var listed []struct{ Name string }
	if err := json.Unmarshal([]byte(pf.Must("host", "list", "-o", "json")), &listed); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range listed {
		names = append(names, h.Name)
	}
	if !slices.Equal(names, want) {
		t.Errorf("host list -o json: %d hosts, want the %d registered, in order", len(names), len(want))
	}
	if lines := strings.Count(pf.Must("host", "list"), "\n"); lines != hosts+1 {
		t.Errorf("host list: %d lines, want a header and %d hosts", lines, hosts)
	}
	for _, args := range [][]string{{"ps"}, {"ps", "--service", "web"}} {
		var ins []struct{ ID, Host string }
		if err := json.Unmarshal([]byte(pf.Must(append(args, "-o", "json")...)), &ins); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, in := range ins {
			seen[in.ID] = true
		}
		if len(ins) != instances || len(seen) != instances {
			t.Errorf("%v: %d instances (%d different), want %d", args, len(ins), len(seen), instances)
		}
	}
	var file struct{ Hosts []struct{ Name string } }
	if err := json.Unmarshal([]byte(pf.Must("plan", "export")), &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Hosts) != hosts {
		t.Errorf("plan export: %d hosts, want %d", len(file.Hosts), hosts)
	}
}
