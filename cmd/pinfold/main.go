// Command pinfold is the one binary of pinfold: the planner, the node agent
// and the command-line client are its subcommands.
//
// Exit codes: 0 success; 1 a well-formed request that cannot be met (for
// example not enough capacity); 2 bad input or usage, or a host that cannot be
// read. Nothing is changed when the exit code is not 0.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK       = 0
	exitUnmet    = 1 // the request is valid but cannot be met
	exitBadInput = 2 // usage errors, invalid input, unreadable host files
)

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

Exit codes: 0 ok, 1 request cannot be met, 2 bad input or unreadable host.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.HiddenDefaultCmd = false
	root.AddCommand(newTopologyCmd(), newPlanCmd(), newPlannerCmd(), newPKICmd(), newAgentCmd(), newUpCmd(), newHostCmd(),
		newDeployCmd(), newScaleCmd(), newResizeCmd(), newRemoveCmd(), newReplaceCmd(), newRebalanceCmd(), newPsCmd(), newCapacityCmd(),
		newHealthCmd(), newSettingsCmd(), newVersionCmd())
	return root
}

// version is set at link time: -ldflags "-X main.version=…".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the pinfold version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "pinfold", version)
			return err
		},
	}
}
