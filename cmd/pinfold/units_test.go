package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestUnitsHardened: the packaged units score below 5 ("OK" or better) in
// systemd-analyze security --offline: the planner runs as its own user
// without capabilities, the agent keeps only what cgroups and Docker need.
// Skipped where systemd-analyze is not installed (hack/test.sh installs it
// for the package tier).
func TestUnitsHardened(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	overall := regexp.MustCompile(`Overall exposure level for \S+: (\d+\.\d+)`)
	for _, unit := range []string{"pinfold-planner.service", "pinfold-agent.service"} {
		t.Run(unit, func(t *testing.T) {
			out, err := exec.Command(bin, "security", "--offline=true", "--no-pager", filepath.Join("../../hack/package", unit)).CombinedOutput()
			m := overall.FindSubmatch(out)
			if m == nil {
				t.Fatalf("systemd-analyze security: %v\n%s", err, out)
			}
			score, _ := strconv.ParseFloat(string(m[1]), 64)
			t.Logf("%s: exposure %.1f", unit, score)
			if score >= 5 {
				t.Errorf("%s: exposure %.1f, want below 5:\n%s", unit, score, out)
			}
		})
	}
}
