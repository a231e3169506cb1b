package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestMemoryFirstReserveExplained: the shared-pool CPUs kept for the
// largest memory-first quota are free, yet a bound deploy cannot use them;
// host show and capacity say how many, which and why, so capacity below
// the free CPUs is explained where it is shown.
func TestMemoryFirstReserveExplained(t *testing.T) {
	pf := plannerCLI(t)
	pf.Must("host", "add", "h1", "--topology", laptopTopology)
	pf.Must("deploy", "mf", "--count", "1", "--cpu", "2.5", "--memory", "64MiB", "--image", "i")

	show := pf.Must("host", "show", "h1")
	for _, want := range []string{
		"Kept for memory-first: CPUs 5-7, 3 free CPUs kept for the largest memory-first quota (2.5 CPUs)",
		"7    100       -                          100 (kept for memory-first)",
	} {
		if !strings.Contains(show, want) {
			t.Errorf("host show lacks %q:\n%s", want, show)
		}
	}
	var sj struct {
		Kept string `json:"kept_for_memory_first_cpus"`
	}
	if err := json.Unmarshal([]byte(pf.Must("host", "show", "h1", "-o", "json")), &sj); err != nil || sj.Kept != "5-7" {
		t.Errorf("host show -o json kept_for_memory_first_cpus = %q, %v; want 5-7", sj.Kept, err)
	}

	capTable := pf.Must("capacity", "--cpu", "1", "--bind", "--memory", "64MiB")
	if !strings.Contains(capTable, "total  5") || !strings.Contains(capTable, "h1: 3 free CPUs kept for the largest memory-first quota (2.5 CPUs)") {
		t.Errorf("capacity of 8 free CPUs less 3 kept, explained:\n%s", capTable)
	}
	var cj struct {
		Total int            `json:"total_capacity"`
		Kept  map[string]int `json:"kept_for_memory_first_count"`
	}
	if err := json.Unmarshal([]byte(pf.Must("capacity", "--cpu", "1", "--bind", "--memory", "64MiB", "-o", "json")), &cj); err != nil || cj.Total != 5 || cj.Kept["h1"] != 3 {
		t.Errorf("capacity -o json = %+v, %v; want total 5, 3 kept on h1", cj, err)
	}
	// Memory-first capacity is not limited by the reserve: no note.
	if mf := pf.Must("capacity", "--cpu", "0.5", "--memory", "64MiB"); strings.Contains(mf, "kept") {
		t.Errorf("memory-first capacity explains a reserve it is not limited by:\n%s", mf)
	}
	// What capacity says is what deploy does.
	pf.Must("deploy", "web", "--count", "5", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "i")
	if _, errOut, code := pf.Run("deploy", "more", "--count", "1", "--cpu", "1", "--bind", "--memory", "64MiB", "--image", "i"); code != 1 {
		t.Errorf("a bound deploy onto the kept CPUs: exit %d, want 1: %s", code, errOut)
	}
}
