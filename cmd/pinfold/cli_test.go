package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The CLI tests' one set of helpers: runCLI runs the command line
// in-process; a cli runs it against one planner. Tests use these rather
// than closures of their own (TestNoPastedCLIHelpers keeps it so).

// runCLI runs the pinfold command line in-process with stdin as its
// standard input.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, strings.NewReader(stdin), &o, &e)
	return o.String(), e.String(), code
}

// cli runs pinfold commands against one planner: each command gets
// --planner and the extra global flags (TLS certificate flags) after its
// own arguments, and an empty stdin. A failure fails t, the test the cli
// was made for.
type cli struct {
	t     *testing.T
	flags []string
}

// newCLI returns a cli for the planner at addr; flags are added to every
// command after --planner addr.
func newCLI(t *testing.T, addr string, flags ...string) *cli {
	return &cli{t: t, flags: append([]string{"--planner", addr}, flags...)}
}

// plannerCLI starts a planner and returns a cli for it.
func plannerCLI(t *testing.T) *cli {
	t.Helper()
	return newCLI(t, startPlanner(t))
}

// Run runs the command and returns what it wrote and its exit code.
func (c *cli) Run(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	return runCLI(c.t, "", append(args[:len(args):len(args)], c.flags...)...)
}

// Must runs the command and returns its stdout; an exit code other than 0
// fails the test, naming the command, the code and what it wrote.
func (c *cli) Must(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.Run(args...)
	if code != 0 {
		c.t.Fatalf("pinfold %v: exit %d: %s%s", args, code, out, errOut)
	}
	return out
}

// Fails runs a command that is to be refused with exit code want and
// returns its stderr; another code fails the test, naming the command,
// the code and what it wrote.
func (c *cli) Fails(want int, args ...string) string {
	c.t.Helper()
	out, errOut, code := c.Run(args...)
	if code != want {
		c.t.Fatalf("pinfold %v: exit %d, want %d: %s%s", args, code, want, out, errOut)
	}
	return errOut
}

// Combined runs the command and returns its stdout followed by its stderr
// (not interleaved), for tests that look for a message on either stream.
func (c *cli) Combined(args ...string) (out string, code int) {
	c.t.Helper()
	o, e, code := c.Run(args...)
	return o + e, code
}

// MustCombined is Must returning stdout followed by stderr.
func (c *cli) MustCombined(args ...string) string {
	c.t.Helper()
	out, code := c.Combined(args...)
	if code != 0 {
		c.t.Fatalf("pinfold %v: exit %d: %s", args, code, out)
	}
	return out
}

// TestNoPastedCLIHelpers: no CLI test defines run or must closures, or
// another closure of a command's args (a runner as the TLS tests had),
// of its own again (issue 37 item 7: a dozen pasted copies, each a
// little different); they use runCLI and cli above.
func TestNoPastedCLIHelpers(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("glob *_test.go: %v, %d files", err, len(files))
	}
	pasted := regexp.MustCompile(`\b(run|must)\s*:?=\s*func\(|:?=\s*func\((\w+ [\w.]+, )?args \.\.\.string\)`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if pasted.MatchString(line) {
				t.Errorf("%s:%d: %s\nuse runCLI or a cli (cli_test.go) instead of a closure of its own", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
