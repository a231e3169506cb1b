// Command pinfold is the one binary of pinfold: the planner, the node agent
// and the command-line client are its subcommands.
//
// Exit codes: 0 success; 1 a well-formed request that cannot be met (for
// example not enough capacity); 2 bad input or usage, or a host that cannot be
// read; 3 the planner could not be reached; 4 the outcome is unknown (the
// planner failed, or the connection was lost after a change was sent).
// Nothing is changed when the exit code is 2 or 3.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Exit codes; exitCodesHelp says them to users (root --help, README).
const (
	exitOK       = 0
	exitUnmet    = 1 // the request is valid but cannot be met
	exitBadInput = 2 // usage errors, invalid input, unreadable host files
	// exitUnreachable: the planner could not be reached (not running, wrong
	// address, network), or a read failed: nothing was changed, worth a
	// retry, unlike 1 and 2.
	exitUnreachable = 3
	// exitUnknown: the outcome is unknown: the planner failed (an internal
	// error), or the connection was lost after a change was sent or made.
	// A retry may do a change twice: look first.
	exitUnknown = 4
	// exitDenied: the client certificate's role may not make the call
	// (an admin certificate may); nothing was changed.
	exitDenied = 5
)

const exitCodesHelp = `Exit codes:
  0 ok
  1 the request cannot be met (not enough capacity, a rule, a host that
    cannot be removed now; or, waiting, not applied everywhere);
    'pinfold health': there are warnings
  2 bad input, usage or configuration (an unknown command, a bad flag or
    value, an unknown name, an unreadable host; no client certificate or
    one the planner refuses, a planner certificate --tls-ca does not
    verify); nothing was changed
  3 the planner could not be reached (or the connection was lost during a
    read); nothing was changed: worth a retry once it is reachable
  4 outcome unknown: the planner failed (an internal error) or the
    connection was lost after the request was sent; repeat the command
    with the --request-id it prints (a deploy, resize, replace or remove
    is then made once), or check with 'pinfold ps' / 'pinfold events'
  5 permission denied: the client certificate's role may not make the
    call (an admin certificate may); nothing was changed`

// exitError carries an exit code and a message for the user.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func badInput(format string, args ...any) error {
	return &exitError{code: exitBadInput, err: fmt.Errorf(format, args...)}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit code; tests call it directly.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.InitDefaultCompletionCmd()
	strictGroups(root)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "pinfold:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// Cobra's own errors: unknown command or flag, wrong argument count.
	return exitBadInput
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "pinfold",
		Short: "Node-level cgroup v2 resource enforcer with a central planner",
		Long: `pinfold plans CPU and memory for containers across hosts and enforces the
plan on each host with cgroup v2 and Docker.

  - The planner gives each instance X whole CPUs plus at most one CPU shared in
    pieces (1/100 or 1/1000 of a CPU), packed inside one NUMA node when it fits.
  - The node agent on every host discovers its topology from sysfs, registers
    it, and writes cpuset, cpu.weight, cpu.max and memory limits.

Start with:
  pinfold topology            show this host's CPUs, cores, caches and NUMA nodes
  pinfold plan -f plan.json   dry-run a placement against described hosts

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.HiddenDefaultCmd = false
	root.AddCommand(newTopologyCmd(), newPlanCmd(), newPlannerCmd(), newPKICmd(), newAgentCmd(), newUpCmd(), newHostCmd(),
		newDeployCmd(), newScaleCmd(), newResizeCmd(), newRemoveCmd(), newReplaceCmd(), newRebalanceCmd(), newPsCmd(), newCapacityCmd(),
		newHealthCmd(), newSettingsCmd(), newEventsCmd(), newApplyCmd(), newDiffCmd(), newVersionCmd())
	root.AddCommand(newManCmd(root))
	return root
}

// strictGroups makes every command group below c (a command that only
// holds subcommands: host, pki, completion) refuse an unknown subcommand
// with exit 2; cobra would print the group's help and exit 0, so that a
// typo ('pinfold host lst') looked like success. The group alone still
// prints its help.
func strictGroups(c *cobra.Command) {
	for _, sub := range c.Commands() {
		if sub.HasSubCommands() && !sub.Runnable() {
			sub.Args = knownSubcommand
			// 'host lst --planner X': the unknown command is the mistake
			// to name, not the flag the group itself lacks.
			sub.FParseErrWhitelist.UnknownFlags = true
			sub.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
		strictGroups(sub)
	}
}

// knownSubcommand refuses an argument to a command group: it can only be
// a subcommand the group does not have.
func knownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	hint := ""
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default for the root
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		hint = fmt.Sprintf(" (did you mean %s?)", strings.Join(s, ", "))
	}
	return badInput("unknown command %q for %q%s; '%s --help' lists its commands", args[0], cmd.CommandPath(), hint, cmd.CommandPath())
}

// version, commit, commitTime and modified are set at link time by the
// build scripts: -ldflags "-X main.version=… $(vcs_ldflags)" (hack/lib.sh,
// used by hack/run.sh, hack/package.sh and hack/test.sh). They name the
// commit even where Go's own VCS stamping is off (GOFLAGS=-buildvcs=false).
var (
	version    = "dev"
	commit     = ""
	commitTime = ""
	modified   = ""
)

// buildInfo is the release and the commit the binary was built from: as the
// build scripts set them at link time, else as the Go toolchain stamped
// them (go build in a git checkout records vcs.revision, vcs.time and
// vcs.modified unless -buildvcs=false).
type buildInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Time     string `json:"commit_time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// CommitUnknown says why no commit is named: a development build
	// without link-time flags or VCS stamping.
	CommitUnknown string `json:"commit_unknown,omitempty"`
	Go            string `json:"go"`
}

// commitUnknown is what version says of a development build that knows no
// commit, instead of a bare "dev".
const commitUnknown = "commit unknown: built without VCS stamping; build with hack/run.sh or hack/package.sh, or go build -buildvcs=true in a git checkout"

func readBuildInfo() buildInfo {
	return buildInfoFrom(version, commit, commitTime, modified, debug.ReadBuildInfo)
}

// buildInfoFrom prefers the link-time values, then the toolchain's VCS
// stamps; read is debug.ReadBuildInfo (a parameter for the tests).
func buildInfoFrom(ver, rev, at, mod string, read func() (*debug.BuildInfo, bool)) buildInfo {
	b := buildInfo{Version: ver, Commit: rev, Time: at, Modified: mod == "true", Go: runtime.Version()}
	fromModule := false
	if info, ok := read(); ok {
		if b.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			// go install …@version: the module version names the source.
			b.Version, fromModule = info.Main.Version, true
		}
		if b.Commit == "" {
			for _, kv := range info.Settings {
				switch kv.Key {
				case "vcs.revision":
					b.Commit = kv.Value
				case "vcs.time":
					b.Time = kv.Value
				case "vcs.modified":
					b.Modified = kv.Value == "true"
				}
			}
		}
	}
	if b.Commit == "" && !fromModule {
		b.CommitUnknown = commitUnknown
	}
	return b
}

func (b buildInfo) String() string {
	s := "pinfold " + b.Version
	switch {
	case b.Commit != "":
		s += " (commit " + b.Commit[:min(12, len(b.Commit))]
		if b.Time != "" {
			s += " of " + b.Time
		}
		if b.Modified {
			s += ", with uncommitted changes"
		}
		s += ")"
	case b.CommitUnknown != "":
		s += " (" + b.CommitUnknown + ")"
	}
	return s + ", " + b.Go
}

func newVersionCmd() *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the pinfold release and the commit it was built from",
		Long: `Print the release (set by hack/package.sh, else the module version, else
"dev") and the git commit the binary was built from, with its time and
whether the checkout had uncommitted changes: as the build scripts
(hack/run.sh, hack/package.sh) set them at link time, else as the Go
toolchain stamped them. A plain go build with -buildvcs=false cannot know
the commit; version then says so ("commit unknown: …").`,
		Example: `  pinfold version
  pinfold version -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			b := readBuildInfo()
			if out.json() {
				return writeJSON(cmd.OutOrStdout(), b)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), b)
			return err
		},
	}
	out.register(cmd)
	return cmd
}

// newManCmd writes the man pages (hack/package.sh); hidden from --help.
func newManCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write a man page per command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return badInput("%v", err)
			}
			root.DisableAutoGenTag = true
			return doc.GenManTree(root, &doc.GenManHeader{Title: "PINFOLD", Section: "1", Source: "pinfold " + readBuildInfo().Version, Manual: "pinfold manual"}, args[0])
		},
	}
}
