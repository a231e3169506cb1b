//go:build ui

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// TestUILiveCPUMap: the planner's /ui/ in headless Chromium (Debian's
// chromium; the ui tier installs it, and this test fails without it) lists
// the registered host; a deploy then shows its instances' bands on the CPU
// map without a page reload (the server-sent events stream). With
// PINFOLD_UI_SCREENSHOT set, the page is saved there as a PNG.
func TestUILiveCPUMap(t *testing.T) {
	chrome := os.Getenv("PINFOLD_CHROMIUM")
	if chrome == "" {
		chrome = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chrome); err != nil {
		t.Fatalf("ui tier: no Chromium at %s (hack/test.sh installs Debian's chromium; or set PINFOLD_CHROMIUM): %v", chrome, err)
	}
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	for _, args := range [][]string{
		{"host", "add", "h1", "--topology", "../../numa/testdata/want/laptop-i7-1185g7.json", "--memory-share", "1"},
		{"host", "add", "h2", "--topology", "../../numa/testdata/want/dual-xeon-gold-6230.json", "--reserved-cpus", "0,40"},
	} {
		pf.Must(args...)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true), chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1400, 1100))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/ui/"),
		chromedp.WaitVisible(`#hosts tr[data-host="h1"]`), chromedp.WaitVisible(`#hosts tr[data-host="h2"]`),
		chromedp.WaitVisible(`.host[data-host="h2"] .cpu.reserved[data-cpu="40"]`)); err != nil {
		t.Fatalf("the page did not list the hosts: %v", err)
	}
	loadedAt, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.pinfoldLoadedAt`))
	if err != nil {
		t.Fatal(err)
	}
	if bands, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(".band").length`)); err != nil || bands != 0 {
		t.Fatalf("bands before any deploy = %d, %v", bands, err)
	}
	out, errOut, code := pf.Run("deploy", "web", "--count", "2", "--cpu", "1.5", "--bind", "--memory", "1GiB", "--image", "busybox", "--priority", "batch", "-o", "json")
	if code != 0 {
		t.Fatalf("deploy: %s", errOut)
	}
	var ins []struct {
		ID   string         `json:"id"`
		Host string         `json:"host"`
		CPUs map[string]int `json:"cpus"`
	}
	if err := json.Unmarshal([]byte(out), &ins); err != nil || len(ins) != 2 {
		t.Fatalf("deploy -o json: %v\n%s", err, out)
	}
	for _, in := range ins {
		for cpu := range in.CPUs {
			sel := `.host[data-host="` + in.Host + `"] .cpu[data-cpu="` + cpu + `"] .band[data-instance="` + in.ID + `"]`
			if err := chromedp.Do(ctx, chromedp.WaitVisible(sel)); err != nil {
				t.Fatalf("the CPU map never showed %s on CPU %s of %s: %v", in.ID, cpu, in.Host, err)
			}
		}
	}
	after, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.pinfoldLoadedAt`))
	if err != nil {
		t.Fatal(err)
	}
	renders, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.pinfoldRenders`))
	if err != nil {
		t.Fatal(err)
	}
	if after != loadedAt || renders < 2 {
		t.Errorf("page loaded at %v then %v, %v renders: want one load, redrawn from the event stream", loadedAt, after, renders)
	}
	status, err := chromedp.Run(ctx, chromedp.Text(`#status`))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Text(`#instances tbody`))
	if err != nil {
		t.Fatal(err)
	}
	if status != "live" || !strings.Contains(rows, ins[0].ID) || !strings.Contains(rows, "1.50") || !strings.Contains(rows, "batch") {
		t.Errorf("status %q, instances table %q: want live, the instances with 1.50 CPUs planned and their priority, batch", status, rows)
	}
	// The hosts were registered by hand: the page says their instances
	// wait for an agent, and the host row why.
	if !strings.Contains(rows, "pending (no agent on "+ins[0].Host+")") {
		t.Errorf("instances table %q: want the pending instances marked as waiting for an agent", rows)
	}
	if hostRows, err := chromedp.Run(ctx, chromedp.Text(`#hosts tbody`)); err != nil || !strings.Contains(hostRows, "no agent: registered by hand") {
		t.Errorf("hosts table %q (%v): want the hosts without an agent marked", hostRows, err)
	}
	// More hosts than one page of ListHosts (500): the page walks every
	// page and lists them all, redrawn from the event stream.
	cl := pinfoldv1connect.NewPlannerServiceClient(http.DefaultClient, "http://"+addr)
	tj, err := os.ReadFile("../../numa/testdata/want/laptop-i7-1185g7.json")
	if err != nil {
		t.Fatal(err)
	}
	const more = 510
	for i := range more {
		if _, err := cl.RegisterHost(ctx, connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: fmt.Sprintf("m%04d", i), TopologyJson: tj, MemoryShare: 1})); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(fmt.Sprintf(`#hosts tr[data-host="m%04d"]`, more-1))); err != nil {
		t.Fatalf("the page never listed host m%04d (past the first page of hosts): %v", more-1, err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#hosts tbody tr").length`)); err != nil || n != more+2 {
		t.Errorf("the hosts table has %d rows (%v), want %d", n, err, more+2)
	}
	if path := os.Getenv("PINFOLD_UI_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", path, len(png))
	}
}
