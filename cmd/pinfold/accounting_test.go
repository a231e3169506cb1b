package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanCapacityDeployAgree runs one randomized scenario set through the
// commands a person runs: background deploys, then `capacity` for a probe
// request, `plan export` with the probe added as the file's request, `plan`
// of N+1 (refused, exit 1) and of N (placed), `deploy` of N+1 (refused) and
// of N (placed), and `health` (the store audit: nothing flagged). Settings
// (buffer, overbooking), constraints, max per host, memory-first and whole
// cores vary per scenario; the seeds are fixed, so a failure repeats.
func TestPlanCapacityDeployAgree(t *testing.T) {
	addr := startPlanner(t)
	pf := newCLI(t, addr)
	for i, h := range []string{"a", "b", "c"} {
		pf.Must("host", "add", h, "--topology", "../../numa/testdata/want/laptop-i7-1185g7.json")
		pf.Must("host", "set", h, "--property", fmt.Sprintf("disk=%s", []string{"ssd", "hdd", "ssd"}[i]))
	}
	settings := [][]string{{"--buffer", "cpu=0"}, {"--buffer", "cpu=0.2"}, {"--overbooking", "cpu=0.5"}}
	dir := t.TempDir()
	agreed := 0
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 23))
		// settings changes only what it names: clear the maps for exactly this scenario.
		pf.Must(append([]string{"settings", "--clear", "buffer,overbooking"}, settings[rng.IntN(len(settings))]...)...)
		var bg []string
		for i := range 1 + rng.IntN(3) {
			svc := fmt.Sprintf("bg%d-%d", seed, i)
			args := []string{"deploy", svc, "--image", "i", "--count", fmt.Sprint(1 + rng.IntN(3)), "--cpu", []string{"0.3", "1", "1.7", "2.5"}[rng.IntN(4)], "--memory", "1GiB"}
			if rng.IntN(3) > 0 {
				args = append(args, "--bind")
			}
			if _, _, code := pf.Run(args...); code == 0 {
				bg = append(bg, svc)
			}
		}
		probe := fmt.Sprintf("probe%d", seed)
		cpu := []string{"0.5", "1", "1.5", "2", "3.7"}[rng.IntN(5)]
		flags := []string{"--cpu", cpu, "--memory", []string{"256MiB", "1GiB"}[rng.IntN(2)]}
		req := map[string]any{"service": probe, "strategy": "auto", "memory_bytes": map[string]int64{"256MiB": 256 << 20, "1GiB": 1 << 30}[flags[3]]}
		var f float64
		fmt.Sscan(cpu, &f)
		req["cpu"], req["bind"] = f, false
		if rng.IntN(4) > 0 {
			flags, req["bind"] = append(flags, "--bind"), true
			if (cpu == "1" || cpu == "2") && rng.IntN(2) == 0 {
				flags, req["whole_cores"] = append(flags, "--whole-cores"), true
			}
		}
		if rng.IntN(3) == 0 {
			flags, req["constraint"] = append(flags, "--constraint", `disk == "ssd"`), `disk == "ssd"`
		}
		if m := rng.IntN(3); m > 0 {
			flags, req["max_per_host"] = append(flags, "--max-per-host", fmt.Sprint(m)), m
		}
		name := fmt.Sprintf("seed %d: %v", seed, flags)

		var room struct {
			Total int `json:"total_capacity"`
		}
		if err := json.Unmarshal([]byte(pf.Must(append([]string{"capacity", "--service", probe, "-o", "json"}, flags...)...)), &room); err != nil {
			t.Fatal(err)
		}
		n := room.Total
		var file map[string]any
		if err := json.Unmarshal([]byte(pf.Must("plan", "export")), &file); err != nil {
			t.Fatalf("%s: plan export: %v", name, err)
		}
		planned := func(count int) (int, int) {
			req["count"] = count
			file["request"] = req
			b, _ := json.Marshal(file)
			path := filepath.Join(dir, "plan.json")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := runCLI(t, "", "plan", "-f", path, "-o", "json")
			var o struct {
				Placements []any `json:"placements"`
			}
			if code == 0 {
				if err := json.Unmarshal([]byte(out), &o); err != nil {
					t.Fatalf("%s: plan -o json: %v", name, err)
				}
			} else if code != 1 {
				t.Fatalf("%s: plan: exit %d: %s", name, code, errOut)
			}
			return len(o.Placements), code
		}
		if _, code := planned(n + 1); code != 1 {
			t.Errorf("%s: capacity %d, but plan of %d: exit %d", name, n, n+1, code)
		}
		if _, _, code := pf.Run(append([]string{"deploy", probe, "--image", "i", "--count", fmt.Sprint(n + 1)}, flags...)...); code != 1 {
			t.Errorf("%s: capacity %d, but deploy of %d: exit %d", name, n, n+1, code)
		}
		if n > 0 {
			if got, code := planned(n); code != 0 || got != n {
				t.Errorf("%s: capacity %d, but plan of %d placed %d (exit %d)", name, n, n, got, code)
			}
			pf.Must(append([]string{"deploy", probe, "--image", "i", "--count", fmt.Sprint(n)}, flags...)...)
			agreed++
		}
		if out, _, code := pf.Run("health"); code != 0 || !strings.Contains(out, "healthy") {
			t.Errorf("%s: health after the deploy: exit %d\n%s", name, code, out)
		}
		for _, svc := range append(bg, probe) {
			pf.Run("remove", svc)
		}
	}
	if agreed < 6 {
		t.Errorf("only %d of 12 scenarios had room for the probe: draw again", agreed)
	}
}
