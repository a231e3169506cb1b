package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// parsePorts reads the --port flags and checks them as the planner will
// (bad input names the flag and its value).
func parsePorts(flags []string, network string) ([]model.Port, error) {
	var ports []model.Port
	for _, f := range flags {
		p, err := model.ParsePort(f)
		if err != nil {
			return nil, badInput("--%v", err)
		}
		ports = append(ports, p)
	}
	if err := model.ValidatePorts(ports, network); err != nil {
		return nil, badInput("--%v", err)
	}
	return ports, nil
}

func newDeployCmd() *cobra.Command {
	var (
		c          clientFlags
		out        outputFlag
		count      int32
		cpu        string
		bind       bool
		wholeCores bool
		memory     string
		memorySoft string
		strategy   string
		maxPerHost int32
		priority   string
		noPreempt  bool
		never      bool
		dryRun     bool
		image      string
		env        []string
		network    string
		portFlags  []string
		health     healthFlags
		rules      ruleFlags
		ctr        containerFlags
	)
	cmd := &cobra.Command{
		Use:   "deploy SERVICE [-- COMMAND ARGS…]",
		Short: "Place new instances of a service (all or nothing)",
		Long: `Place --count new instances. With --bind each instance gets X whole CPUs plus
at most one CPU shared in pieces (1.7 = 1 CPU + 70 pieces of another),
NUMA-local when it fits; without --bind, memory decides and the CPU amount is
a quota over the host's shared CPUs. The whole request is one transaction:
either every instance is placed or none.

--whole-cores (with --bind and a whole number of CPUs) gives each instance
whole physical cores: no SMT sibling of its CPUs runs another instance or
is reserved for the system (kubelet's full-pcpus-only). On a host with two
threads per core the CPU count must be even; 'pinfold capacity
--whole-cores' counts what such a deploy can take. Whole-cores instances
resize by whole cores: a grow keeps their cores and adds free ones, a
shrink keeps some of their own.

Strategies: auto (level the service's instance counts), each (N on every
host that can take N), fill (top every host up to N), global (least used
share first), drained (smallest remaining capacity first).

Placement rules decide which hosts may take the instances before the
strategy decides how many each gets: disabled and
maintenance hosts are left out, then --constraint (an expression over host
properties: == != > >= < <=, && || !, parentheses, in (a b)), then
--affinity/--anti-affinity to other services' instances (hard; the --soft-
forms give way only when nothing else is left), then capacity (with the
cluster's buffer and overbooking, see 'pinfold settings'), then the fault
and upgrade domain spread (--domain-spread adaptive, max_difference,
quorum_safe or off). --placement-policy ranks what is left: nodes_order
(--hosts-order), load_avg (agent-measured) or spread (stable, seeded by the
service name). When nothing can be placed, the error lists rule by rule
which hosts each rule eliminated.

--network sets the containers' Docker network mode (host, none, bridge or a
network's name). On the host network, mind that a blue-green replace runs
the new container while the paused old one still holds its ports: the
replacement must listen elsewhere, or its health check fails and the old
container resumes.

The rest of the container is Docker's: --volume (repeatable) mounts a host
path (/srv/data:/data, a bind mount) or a named volume (pgdata:/data, made
by the engine when missing), read-only with :ro; --restart no,
on-failure[:N], always or unless-stopped; --label K=V; --user; --workdir;
--read-only (a read-only root filesystem); --cap-add/--cap-drop
(NET_ADMIN, CAP_SYS_TIME, ALL); --log-driver and --log-opt K=V. None of it
changes on a live container: 'pinfold replace' with these flags swaps the
containers blue-green. A volume lives on one host, so rebalance and host
drain leave such an instance where it is unless given
--move-local-volumes (its data does not follow it); the heal of a DOWN
host still places it again elsewhere, with an empty volume.

--port gives each instance a named host port, published to its container
(under --network host the container listens on it directly) and passed to
it as PINFOLD_PORT_<NAME> (upper-cased, other characters than letters and
digits as _). NAME=PORT is static: two instances holding it never share a
host (the Ports placement rule), so at most one per host. NAME alone is
dynamic: the planner picks the lowest free port of 20000-32000 on the
instance's host. :CONTAINER names the container port (default: the host
port). --health-port NAME points the health check at that port: alone a
TCP check, with --health-http /PATH an HTTP one. A replace keeps static
ports (the agent stops the old container first) and gives dynamic ones
anew; a move or heal gets them on the new host.

A deploy that does not fit preempts: it stops the fewest instances of
services of strictly lower --priority (best-effort before batch, then
fewest, then by ID) in the same commit that places it, and lists them
("preempted ID (service, priority) on HOST"; -o json: each instance's
preempted) and in the events (kind Preempted, naming the preemptor).
The victims are not placed again. --dry-run shows where the deploy would
go and which instances it would stop, changing nothing; --no-preempt
fails instead. A service deployed --never-preempted (production or
higher) is never stopped for another, whatever that one's priority.`,
		Example: `  pinfold deploy web --count 3 --cpu 1.7 --bind --memory 1GiB --image nginx
  pinfold deploy cache --count 2 --cpu 0.5 --memory 4GiB --memory-soft 2GiB --image redis:7
  pinfold deploy db --count 2 --cpu 4 --bind --whole-cores --memory 8GiB --image postgres:16
  pinfold deploy agent --count 1 --strategy each --cpu 0.1 --bind --memory 64MiB --image debian:12 -- sleep infinity
  pinfold deploy api --count 2 --cpu 0.5 --memory 128MiB --image myapi --network host --health-http 8080/healthz
  pinfold deploy web --count 2 --cpu 0.5 --memory 128MiB --image nginx --port http=8080:80 --health-port http --health-http /
  pinfold deploy echo --cpu 0.1 --memory 32MiB --image busybox --port http --health-port http -- sh -c 'httpd -f -p $PINFOLD_PORT_HTTP'
  pinfold deploy db --count 5 --cpu 2 --bind --memory 8GiB --image postgres:16 \
      --constraint "HasSSD == true && SomeProperty >= 4" --anti-affinity batch --placement-policy load_avg
  pinfold deploy pg --count 1 --cpu 2 --bind --memory 4GiB --image postgres:16 \
      --volume pgdata:/var/lib/postgresql/data --volume /etc/pg/conf:/etc/postgresql:ro \
      --restart unless-stopped --label team=data --user 999:999 --cap-drop ALL --log-opt max-size=10m`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if image == "" {
				return badInput("--image is required: the container image the instances run, e.g. --image debian:12")
			}
			cpuS, mem, err := parseCPUAndMemory(cpu, memory)
			if err != nil {
				return err
			}
			soft := int64(0)
			if memorySoft != "" {
				if soft, err = parseSize("--memory-soft", memorySoft, false); err != nil {
					return err
				}
			}
			if err := checkInstanceSize(cpuS, bind, mem, soft, memory); err != nil {
				return err
			}
			hc, err := health.msg()
			if err != nil {
				return err
			}
			cs, err := ctr.msg()
			if err != nil {
				return err
			}
			ports, err := parsePorts(portFlags, network)
			if err != nil {
				return err
			}
			prio, err := model.ParsePriority(priority)
			if err != nil {
				return badInput("--priority %q: want system, production, batch, best-effort or an integer from %d to %d", priority, model.MinPriority, model.MaxPriority)
			}
			if never && prio < model.PriorityProduction {
				return badInput("--never-preempted with --priority %s: only for a priority of production (0) or higher (a %s service gives way when room is short)", prio, prio)
			}
			dreq := &pinfoldv1.DeployRequest{Service: args[0], Image: image, Priority: int32(prio),
				Command: args[1:], Env: env, Network: network, Count: count, Cpu: cpuS, Bind: bind, WholeCores: wholeCores, MemoryBytes: mem, MemorySoftBytes: soft,
				Strategy: strategy, MaxPerHost: maxPerHost, Health: hc, Container: cs, Ports: pinfoldv1.NewPorts(ports),
				NoPreempt: noPreempt, DryRun: dryRun, NeverPreempted: never}
			if err := rules.apply(dreq); err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				t0 := time.Now()
				var progress *slowProgress
				if !out.json() {
					per := ""
					if strategy == string(alloc.Each) || strategy == string(alloc.Fill) {
						per = " per host" // the count of each and fill is per host
					}
					progress = startProgress(cmd.ErrOrStderr(), progressDelay, "placing %d%s × %s (%s %s, %s)…\n", count, per, args[0], cpusOf(cpuS), bindWord(bind), formatBytes(mem))
				}
				resp, err := cl.Deploy(cmd.Context(), connect.NewRequest(dreq))
				progress.stop()
				if err != nil {
					return err
				}
				if !out.json() {
					if resp.Msg.DomainSpread != "" {
						fmt.Fprintf(cmd.ErrOrStderr(), "fault and upgrade domains: %s rule\n", resp.Msg.DomainSpread)
					}
					for _, v := range resp.Msg.Violations {
						fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: soft rule %s gave way: %s\n", v.Rule, v.Detail)
					}
				}
				warnNoRoom(cmd.ErrOrStderr(), args[0], resp.Msg.NoRoom)
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), deployJSON(resp.Msg))
				}
				hosts := map[string]bool{}
				for _, in := range resp.Msg.Instances {
					hosts[in.Host] = true
				}
				verb := "preempted"
				if resp.Msg.DryRun {
					verb = "would preempt"
				}
				printVictims(cmd.ErrOrStderr(), verb, resp.Msg.Preempted)
				if resp.Msg.DryRun {
					fmt.Fprintf(cmd.ErrOrStderr(), "dry run: would place %s on %s; nothing was changed\n", counted(len(resp.Msg.Instances), "instance"), counted(len(hosts), "host"))
					return printInstances(cmd.OutOrStdout(), resp.Msg.Instances)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "placed %s on %s in %s\n", counted(len(resp.Msg.Instances), "instance"), counted(len(hosts), "host"), time.Since(t0).Round(time.Millisecond))
				warnUnenforced(cmd.Context(), cl, cmd.ErrOrStderr(), slices.Sorted(maps.Keys(hosts)))
				return printInstances(cmd.OutOrStdout(), resp.Msg.Instances)
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	f := cmd.Flags()
	f.Int32Var(&count, "count", 1, "instances to place (per host for each and fill)")
	f.StringVar(&cpu, "cpu", "1", "CPUs per instance, a decimal (1.7) of whole pieces (0.01 CPU at the default share base: 0.505 is refused with the nearest amounts); with --bind at least one piece; without it 0 means best effort: no CPU quota, the shared pool at the lowest cpu.weight")
	f.BoolVar(&bind, "bind", false, "bind CPUs (cpuset) instead of a memory-first CPU quota")
	f.BoolVar(&wholeCores, "whole-cores", false, "whole physical cores only: no SMT sibling shared with another instance (needs --bind, whole CPUs)")
	f.StringVar(&memory, "memory", "", "memory per instance (hard limit), e.g. 512MiB, 1.5GiB, 1G")
	f.StringVar(&memorySoft, "memory-soft", "", "soft memory limit (reservation), at most --memory")
	f.StringVar(&strategy, "strategy", "auto", "auto, each, fill, global or drained")
	f.Int32Var(&maxPerHost, "max-per-host", 0, "cap on the service's instances per host (0: none)")
	f.StringVar(&priority, "priority", "production", "the service's priority: system (1000), production (0), batch (-500), best-effort (-1000) or an integer from -100000 to 100000; kept in its record and files, more instances are deployed at the same priority; a deploy that does not fit stops the fewest instances of strictly lower priority (see --no-preempt)")
	f.BoolVar(&never, "never-preempted", false, "no instance of the service is ever stopped to make room for another, whatever its priority; only with --priority production or higher; kept in its record (services file never_preempted, compose x-pinfold-never-preempted)")
	f.BoolVar(&noPreempt, "no-preempt", false, "when the deploy does not fit, fail rather than stop instances of lower-priority services to make room")
	f.BoolVar(&dryRun, "dry-run", false, "plan the deploy and say where it would go and which instances it would preempt; change nothing")
	f.StringVar(&image, "image", "", "container image the instances run (required), e.g. debian:12")
	f.StringArrayVar(&env, "env", nil, "environment variable K=V (repeatable)")
	f.StringVar(&network, "network", "", "Docker network mode: host, none, bridge or a network's name (default: the engine's)")
	f.StringArrayVar(&portFlags, "port", nil, "a named host port (repeatable): NAME=PORT[:CONTAINER] static, NAME[:CONTAINER] dynamic (picked from 20000-32000); the container gets PINFOLD_PORT_<NAME>")
	health.register(cmd)
	rules.register(cmd)
	ctr.register(cmd)
	_ = cmd.MarkFlagRequired("memory")
	_ = cmd.RegisterFlagCompletionFunc("strategy", cobra.FixedCompletions([]string{"auto", "each", "fill", "global", "drained"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// warnNoRoom warns that a service placed per host (each, fill) got no
// instance on hosts its rules allow, for want of room (on stderr, with
// -o json too).
func warnNoRoom(w io.Writer, service string, hosts []string) {
	if len(hosts) == 0 {
		return
	}
	shown := hosts
	if len(shown) > 10 {
		shown = shown[:10]
	}
	more := ""
	if len(hosts) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(hosts)-len(shown))
	}
	fmt.Fprintf(w, "WARNING: %s is placed per host, and %s the rules allow had no room for it: %s%s (they run none; pinfold capacity shows the room)\n",
		service, counted(len(hosts), "host"), strings.Join(shown, ", "), more)
}

func newRemoveCmd() *cobra.Command {
	var (
		c   clientFlags
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "remove (SERVICE|INSTANCE)",
		Short: "Remove an instance, or a whole service, releasing its resources",
		Long: `Remove one instance (by ID) or every instance of a service and the service's
record, releasing their CPUs and memory in one transaction; each host's
agent then removes the containers. To keep the service and change its
number of instances, use 'pinfold scale'.`,
		Example: `  pinfold remove web
  pinfold remove web-3f2a9c0d1e -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.Remove(cmd.Context(), connect.NewRequest(&pinfoldv1.RemoveRequest{Target: args[0]}))
				if err != nil {
					return err
				}
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), map[string][]string{"removed": append([]string{}, resp.Msg.Ids...)})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s: %s\n", instances(len(resp.Msg.Ids)), strings.Join(resp.Msg.Ids, " "))
				return nil
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, false, true, true)
	c.register(cmd)
	out.register(cmd)
	return cmd
}

// warnUnenforced says which of hosts (sorted) no agent enforces, and why:
// their instances stay pending. It asks for at most 20 hosts (a larger
// deploy's warning names those), and says nothing when a host cannot be
// read (the deploy itself succeeded).
func warnUnenforced(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, w io.Writer, hosts []string) {
	for _, name := range hosts[:min(len(hosts), 20)] {
		r, err := cl.GetHost(ctx, connect.NewRequest(&pinfoldv1.GetHostRequest{Name: name}))
		if err != nil {
			return
		}
		if h := r.Msg.Host; !h.Agent || h.State == "down" {
			why := agentState(h)
			if !strings.Contains(why, "stay pending") { // a hand-registered host's says so
				why += ": its instances stay pending"
			}
			fmt.Fprintf(w, "WARNING: host %s: %s\n", name, why)
		}
	}
}

// deployJSON is a deploy's instances as ps -o json writes them, each
// host's victims (resp.Preempted) on the first instance placed there.
// printVictims writes one line per victim of a preemption: "VERB ID
// (service, priority P) on HOST" (VERB: preempted, would preempt).
func printVictims(w io.Writer, verb string, vs []*pinfoldv1.Victim) {
	for _, v := range vs {
		fmt.Fprintf(w, "%s %s (%s, priority %s) on %s\n", verb, v.Id, v.Service, model.Priority(v.Priority), v.Host)
	}
}

func deployJSON(resp *pinfoldv1.DeployResponse) []instanceJSON {
	out := instancesJSON(resp.Instances)
	first := map[string]int{}
	for i := len(out) - 1; i >= 0; i-- {
		first[out[i].Host] = i
	}
	for _, v := range resp.Preempted {
		i, ok := first[v.Host]
		if !ok {
			i = 0 // a victim's room taken on another host's (not expected)
		}
		if len(out) > 0 {
			out[i].Preempted = append(out[i].Preempted, victimJSON{ID: v.Id, Service: v.Service, Host: v.Host, Priority: v.Priority})
		}
	}
	return out
}
