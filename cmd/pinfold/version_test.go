package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionNamesCommit builds the binary as the build scripts do, with
// Go's VCS stamping off (GOFLAGS=-buildvcs=false, as on the development
// machines), and as a plain go build does: the first names the checkout's
// commit, the second says the commit is unknown and why.
func TestVersionNamesCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	git := exec.Command("git", "rev-parse", "HEAD")
	git.Dir = root
	rev, err := git.Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	want := strings.TrimSpace(string(rev))
	flags := exec.Command("bash", "-c", ". hack/lib.sh && vcs_ldflags")
	flags.Dir = root
	ld, err := flags.Output()
	if err != nil {
		t.Fatalf("hack/lib.sh vcs_ldflags: %v", err)
	}
	dir := t.TempDir()
	build := func(t *testing.T, ldflags string) string {
		bin := filepath.Join(dir, "pinfold")
		cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "./cmd/pinfold")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		return bin
	}
	version := func(t *testing.T, bin string, args ...string) string {
		out, err := exec.Command(bin, append([]string{"version"}, args...)...).Output()
		if err != nil {
			t.Fatalf("pinfold version: %v", err)
		}
		return string(out)
	}
	t.Run("script flags", func(t *testing.T) {
		bin := build(t, strings.TrimSpace(string(ld)))
		if out := version(t, bin); !strings.Contains(out, "(commit "+want[:12]) {
			t.Errorf("version = %q, want commit %s", out, want[:12])
		}
		var b buildInfo
		if err := json.Unmarshal([]byte(version(t, bin, "-o", "json")), &b); err != nil {
			t.Fatal(err)
		}
		if b.Commit != want || b.CommitUnknown != "" {
			t.Errorf("version -o json = %+v, want commit %s", b, want)
		}
		if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(b.Time) {
			t.Errorf("commit_time = %q, want RFC 3339 UTC as Go stamps it", b.Time)
		}
	})
	t.Run("plain go build", func(t *testing.T) {
		out := version(t, build(t, ""))
		if !strings.Contains(out, "commit unknown: built without VCS stamping") || !strings.Contains(out, "hack/run.sh") {
			t.Errorf("version = %q, want it to say the commit is unknown and how to build with it", out)
		}
	})
}

// TestBuildScriptsStampCommit: every build of the binary in hack/ passes
// vcs_ldflags, so the commit is named in every build path.
func TestBuildScriptsStampCommit(t *testing.T) {
	files, err := filepath.Glob("../../hack/*.sh")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "go build") && strings.Contains(line, "./cmd/pinfold") && !strings.HasPrefix(strings.TrimSpace(line), "#") {
				n++
				if !strings.Contains(line, "$(vcs_ldflags)") {
					t.Errorf("%s:%d builds pinfold without $(vcs_ldflags): %s", filepath.Base(f), i+1, line)
				}
			}
		}
	}
	if n < 3 {
		t.Errorf("found %d builds of ./cmd/pinfold in hack/*.sh, want run.sh, package.sh and test.sh", n)
	}
}

func TestBuildInfoFrom(t *testing.T) {
	stamped := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"},
		}}, true
	}
	bare := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true
	}
	module := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true
	}
	tests := []struct {
		name                string
		ver, rev, at, mod   string
		read                func() (*debug.BuildInfo, bool)
		wantVersion, wantIn string
	}{
		{"link-time flags win", "dev", "fedcba9876543210", "2026-02-03T00:00:00Z", "false", stamped, "dev", "(commit fedcba987654 of 2026-02-03T00:00:00Z)"},
		{"toolchain stamps", "dev", "", "", "", stamped, "dev", "(commit 0123456789ab of 2026-01-02T03:04:05Z, with uncommitted changes)"},
		{"no stamps", "dev", "", "", "", bare, "dev", "(commit unknown: built without VCS stamping"},
		{"package version without commit", "1.0", "", "", "", bare, "1.0", "(commit unknown"},
		{"module version", "dev", "", "", "", module, "v1.2.3", "pinfold v1.2.3, go"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := buildInfoFrom(tt.ver, tt.rev, tt.at, tt.mod, tt.read)
			if b.Version != tt.wantVersion || !strings.Contains(b.String(), tt.wantIn) {
				t.Errorf("buildInfoFrom = %q (version %q), want %q in it, version %q", b.String(), b.Version, tt.wantIn, tt.wantVersion)
			}
		})
	}
}
