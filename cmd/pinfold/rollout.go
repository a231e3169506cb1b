package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// healthFlags are a replacement's health check: one of a shell command run
// in the container, a TCP port, or an HTTP PORT/PATH.
type healthFlags struct {
	cmd, http, timeout, port string
	tcp                      int32
}

func (h *healthFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&h.cmd, "health-cmd", "", `health probe: a shell command run in the new container (exit 0 = healthy), e.g. "test -f /ready"`)
	f.Int32Var(&h.tcp, "health-tcp", 0, "health probe: a TCP port on the new container that must accept a connection")
	f.StringVar(&h.http, "health-http", "", "health probe: PORT[/PATH] that must answer 2xx or 3xx, e.g. 8080/healthz")
	f.StringVar(&h.timeout, "health-timeout", "", "how long the new container has to pass its check (default 30s)")
	f.StringVar(&h.port, "health-port", "", "health probe on one of the instance's --port names: alone a TCP check, with --health-http /PATH an HTTP one")
}

// msg returns the check, nil when no probe flag was given (then the image's
// HEALTHCHECK decides, or the container must keep running).
func (h *healthFlags) msg() (*pinfoldv1.HealthCheck, error) {
	n := 0
	if h.port != "" && (h.cmd != "" || h.tcp != 0) {
		return nil, badInput("--health-port %q: only alone (a TCP check) or with --health-http /PATH", h.port)
	}
	if h.port != "" && h.http != "" && !strings.HasPrefix(h.http, "/") {
		return nil, badInput("--health-http %q with --health-port: want a bare /PATH, e.g. /healthz", h.http)
	}
	for _, set := range []bool{h.cmd != "", h.tcp != 0, h.http != "", h.port != "" && h.http == ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, badInput("--health-cmd, --health-tcp and --health-http exclude each other")
	}
	if h.timeout != "" {
		if d, err := time.ParseDuration(h.timeout); err != nil || d <= 0 {
			return nil, badInput("--health-timeout %q: want a duration such as 30s", h.timeout)
		}
		if n == 0 {
			return nil, badInput("--health-timeout %q needs --health-cmd, --health-tcp or --health-http", h.timeout)
		}
	}
	if n == 0 {
		return nil, nil
	}
	m := &pinfoldv1.HealthCheck{Tcp: h.tcp, Http: h.http, Timeout: h.timeout, Port: h.port}
	if h.cmd != "" {
		m.Exec = []string{"sh", "-c", h.cmd}
	}
	return m, nil
}

// waitMode is what a wait is for: it decides what counts as a failure.
type waitMode int

const (
	waitResize  waitMode = iota // failure: the planner rolled the resize back
	waitReplace                 // failure: the agent rolled the replacement back
)

// waitApplied polls until every instance in want (ID → generation) runs at
// least that generation on its host, one fails, or the timeout passes.
// Instances on hosts without an agent, or down, are not waited for: they
// are named, and the wait ends with exit code 1 (the change is recorded).
func waitApplied(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, want map[string]int64, mode waitMode, timeout time.Duration, progress io.Writer) ([]*pinfoldv1.Instance, error) {
	hosts, err := allHosts(ctx, cl)
	if err != nil {
		return nil, err
	}
	// Why a host cannot apply anything now ("": it can).
	cannot := map[string]string{}
	for _, h := range hosts {
		switch {
		case !h.Agent && h.NoAgent != "":
			cannot[h.Name] = "no agent on host " + h.Name + ": " + h.NoAgent
		case !h.Agent:
			cannot[h.Name] = "no agent on host " + h.Name + " (registered by hand; an agent applies it when it registers)"
		case h.State == "down":
			cannot[h.Name] = "host " + h.Name + " is down (its agent is not heartbeating; it applies it when it returns)"
		}
	}
	deadline := time.Now().Add(timeout)
	lastDone := -1
	for {
		all, err := allInstances(ctx, cl, "", "")
		if err != nil {
			return nil, err
		}
		var got []*pinfoldv1.Instance
		var failed, unapplied []string
		done, total := 0, 0
		for _, in := range all {
			gen, ok := want[in.Id]
			if !ok {
				continue
			}
			got = append(got, in)
			if why, ok := cannot[in.Host]; ok {
				unapplied = append(unapplied, fmt.Sprintf("%s: %s", in.Id, why))
				continue
			}
			total++
			switch {
			case mode == waitResize && in.RolledBack != "" && in.Generation > gen:
				failed = append(failed, fmt.Sprintf("%s: %s", in.Id, in.RolledBack))
			case mode == waitReplace && in.RefusedGeneration == gen:
				failed = append(failed, fmt.Sprintf("%s: %s", in.Id, in.Error))
			case in.ObservedGeneration >= gen && in.State == "running":
				done++
			}
		}
		if progress != nil && done != lastDone {
			// Of every instance, as the error at the end counts them.
			fmt.Fprintf(progress, "  applied on %d/%d instances\n", done, total+len(unapplied))
			lastDone = done
		}
		// A batch settles before it is judged: every instance applied or
		// failed, so no replacement is still in flight when this returns.
		if done+len(failed) == total {
			if len(failed) > 0 {
				return got, &exitError{code: exitUnmet, err: fmt.Errorf("%d of %d instances failed:\n  %s", len(failed), total, strings.Join(failed, "\n  "))}
			}
			if len(unapplied) > 0 {
				return got, &exitError{code: exitUnmet, err: fmt.Errorf("recorded, but applied on %d of %d instances; nothing was applied to:\n  %s\n(--wait 0 records a change without waiting for the hosts)",
					done, done+len(unapplied), strings.Join(unapplied, "\n  "))}
			}
			return got, nil
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("only %d of %d instances applied within %s (see `pinfold ps`)", done, total, timeout)
			if len(failed) > 0 {
				msg += "; failed:\n  " + strings.Join(failed, "\n  ")
			}
			return got, &exitError{code: exitUnmet, err: errors.New(msg)}
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}

func generations(ins []*pinfoldv1.Instance) map[string]int64 {
	m := map[string]int64{}
	for _, in := range ins {
		m[in.Id] = in.Generation
	}
	return m
}

// batches splits a service's hosts, sorted by name, into groups of n.
func batches(ins []*pinfoldv1.Instance, n int) [][]string {
	var hosts []string
	for _, in := range ins {
		if !slices.Contains(hosts, in.Host) {
			hosts = append(hosts, in.Host)
		}
	}
	slices.Sort(hosts)
	if n <= 0 {
		n = len(hosts)
	}
	var out [][]string
	for len(hosts) > 0 {
		k := min(n, len(hosts))
		out = append(out, hosts[:k])
		hosts = hosts[k:]
	}
	return out
}
