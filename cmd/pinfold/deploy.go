package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// instanceJSON is the -o json form of an instance.
type instanceJSON struct {
	ID      string           `json:"id"`
	Service string           `json:"service"`
	Host    string           `json:"host"`
	CPUs    map[string]int32 `json:"cpus"`
	// CPUQuota, CPUPlanned and CPUGot are JSON numbers written exactly
	// as decimals of pieces (1.7, never 1.7000000000000002).
	CPUQuota json.Number `json:"cpu_quota,omitempty"`
	// CPUPlanned is the CPUs the allocation amounts to; CPUGot what the
	// container used over the agent's last window (both in CPUs), null
	// while it is not running (the table's "-": a pending instance did not
	// get 0, it has not run).
	CPUPlanned  json.Number  `json:"cpu_planned"`
	CPUGot      *json.Number `json:"cpu_got"`
	NUMANode    int32        `json:"numa_node"`
	Memory      int64        `json:"memory_bytes"`
	MemorySoft  int64        `json:"memory_soft_bytes,omitempty"`
	Bind        bool         `json:"bind"`
	WholeCores  bool         `json:"whole_cores,omitempty"`
	Image       string       `json:"image,omitempty"`
	Network     string       `json:"network,omitempty"`
	State       string       `json:"state"`
	Generation  int64        `json:"generation"`
	ContainerID string       `json:"container_id,omitempty"`
	PID         int32        `json:"pid,omitempty"`
	Error       string       `json:"error,omitempty"`
	Observed    int64        `json:"observed_generation"`
	MemoryUsed  int64        `json:"memory_current_bytes,omitempty"`
	RolledBack  string       `json:"rolled_back,omitempty"`
	Applied     *appliedJSON `json:"applied,omitempty"`
	// The container settings, flat (model.Container's JSON names).
	model.Container
	// Ports are the host ports the instance holds (its container gets
	// each as PINFOLD_PORT_<NAME>).
	Ports []portJSON `json:"ports,omitempty"`
}

// portJSON is one host port an instance holds.
type portJSON struct {
	Name      string `json:"name"`
	Host      int32  `json:"host_port"`
	Container int32  `json:"container_port"`
	Static    bool   `json:"static"`
}

// portsJSON are in's held ports, each marked static when asked so.
func portsJSON(in *pinfoldv1.Instance) []portJSON {
	var out []portJSON
	for _, p := range in.HostPorts {
		static := slices.ContainsFunc(in.Ports, func(q *pinfoldv1.Port) bool { return q.Name == p.Name && q.Host != 0 })
		out = append(out, portJSON{Name: p.Name, Host: p.Host, Container: p.Container, Static: static})
	}
	return out
}

// portsText is in's held ports as the deploy flag writes them
// ("http=8080:80 admin=20000"), "" for none.
func portsText(in *pinfoldv1.Instance) string {
	var parts []string
	for _, p := range pinfoldv1.PortsModel(in.HostPorts) {
		if p.Container == p.Host {
			p.Container = 0
		}
		parts = append(parts, p.String())
	}
	return strings.Join(parts, " ")
}

// appliedJSON is what the host reports the container has.
type appliedJSON struct {
	CPUs        string `json:"cpus"`
	Mems        string `json:"mems"`
	CPUQuota    int64  `json:"cpu_quota_us"`
	CPUWeight   uint64 `json:"cpu_weight"`
	MemoryBytes int64  `json:"memory_bytes"`
}

func toInstanceJSON(in *pinfoldv1.Instance) instanceJSON {
	var ap *appliedJSON
	if a := in.Applied; a != nil {
		ap = &appliedJSON{a.Cpus, a.Mems, a.CpuQuota, a.CpuWeight, a.MemoryBytes}
	}
	var got *json.Number
	if in.State == "running" {
		n := json.Number(cpuAmount(int64(in.CpuGotPieces), in.ShareBase))
		got = &n
	}
	return instanceJSON{Container: in.Container.Model(), Applied: ap, ID: in.Id, Service: in.Service, Host: in.Host, CPUs: cpuMapJSON(in.Cpus), CPUQuota: json.Number(quotaOf(in)),
		CPUPlanned: json.Number(cpuAmount(int64(plannedPieces(in)), in.ShareBase)), CPUGot: got,
		NUMANode: in.NumaNode, Memory: in.MemoryBytes, MemorySoft: in.MemorySoftBytes, Bind: in.Bind, WholeCores: in.WholeCores, Image: in.Image,
		Network: in.Network, State: in.State, Generation: in.Generation, ContainerID: in.ContainerId, PID: in.Pid, Error: in.Error,
		Observed: in.ObservedGeneration, MemoryUsed: in.MemoryCurrentBytes, RolledBack: in.RolledBack, Ports: portsJSON(in)}
}

// plannedPieces is the CPU an instance's allocation amounts to, in pieces.
func plannedPieces(in *pinfoldv1.Instance) int {
	return in.Model().Pieces()
}

// quotaOf is a memory-first instance's CPU quota in CPUs ("" when bound).
func quotaOf(in *pinfoldv1.Instance) string {
	if in.Bind || in.CpuQuotaPieces <= 0 || in.ShareBase <= 0 {
		return ""
	}
	return alloc.FormatPieces(int(in.CpuQuotaPieces), int(in.ShareBase))
}

func instancesJSON(ins []*pinfoldv1.Instance) []instanceJSON {
	out := []instanceJSON{}
	for _, in := range ins {
		out = append(out, toInstanceJSON(in))
	}
	return out
}

func printInstances(w io.Writer, ins []*pinfoldv1.Instance) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// A VOLUMES column only when some instance has one, PORTS only when
	// an instance holds some.
	vols := slices.ContainsFunc(ins, func(in *pinfoldv1.Instance) bool { return len(in.GetContainer().GetVolumes()) > 0 })
	withPorts := slices.ContainsFunc(ins, func(in *pinfoldv1.Instance) bool { return len(in.HostPorts) > 0 })
	ports := func(s string) string {
		if !withPorts {
			return ""
		}
		return s + "\t"
	}
	head := "ID\tSERVICE\tHOST\tNUMA NODE\tCPUS (id:pieces)\tQUOTA\tCPU PLANNED/GOT\tMEMORY\t" + ports("PORTS") + "STATE"
	if vols {
		head += "\tVOLUMES"
	}
	fmt.Fprintln(tw, head)
	for _, in := range ins {
		numa := "cross"
		if in.NumaNode >= 0 {
			numa = fmt.Sprint(in.NumaNode)
		}
		if !in.Bind {
			numa = "-"
		}
		var cpus []string
		for _, id := range slices.Sorted(maps.Keys(in.Cpus)) {
			cpus = append(cpus, fmt.Sprintf("%d:%d", id, in.Cpus[id]))
		}
		state := in.State
		if in.Error != "" {
			state += " (" + in.Error + ")"
		}
		if in.RolledBack != "" {
			state += " [" + in.RolledBack + "]"
		}
		got := "-"
		if in.State == "running" {
			got = cpuAmount(int64(in.CpuGotPieces), in.ShareBase)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s/%s\t%s\t%s%s", in.Id, in.Service, in.Host, numa, orDash(strings.Join(cpus, " ")),
			orDash(quotaOf(in)), cpuAmount(int64(plannedPieces(in)), in.ShareBase), got, formatBytes(in.MemoryBytes), ports(orDash(portsText(in))), state)
		if vols {
			fmt.Fprintf(tw, "\t%s", orDash(strings.Join(in.GetContainer().GetVolumes(), " ")))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

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
anew; a move or heal gets them on the new host.`,
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
			dreq := &pinfoldv1.DeployRequest{Service: args[0], Image: image,
				Command: args[1:], Env: env, Network: network, Count: count, Cpu: cpuS, Bind: bind, WholeCores: wholeCores, MemoryBytes: mem, MemorySoftBytes: soft,
				Strategy: strategy, MaxPerHost: maxPerHost, Health: hc, Container: cs, Ports: pinfoldv1.NewPorts(ports)}
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
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), instancesJSON(resp.Msg.Instances))
				}
				hosts := map[string]bool{}
				for _, in := range resp.Msg.Instances {
					hosts[in.Host] = true
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

func bindFlag(bind, unbind bool) (*bool, error) {
	switch {
	case bind && unbind:
		return nil, badInput("--bind and --no-bind exclude each other")
	case bind:
		return &bind, nil
	case unbind:
		f := false
		return &f, nil
	}
	return nil, nil
}

func newResizeCmd() *cobra.Command {
	var (
		c            clientFlags
		out          outputFlag
		cpu, memory  string
		bind, noBind bool
		force        bool
		wait         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "resize (SERVICE|INSTANCE)",
		Short: "Change CPU and memory of running instances by deltas, in place",
		Long: `Resize by deltas (pass the difference, not the target): --cpu and --memory
take a sign, +0.5 to add half a CPU, -64MiB to take 64 MiB away. An amount
without a sign (--cpu 1) is refused as ambiguous, and so is a change that
comes to nothing: zero, or less than one piece of a CPU (0.01 CPU with the
default share base of 100). A change that is not a whole number of pieces
(+0.015) is refused with the nearest ones, never rounded. The instance
keeps its CPUs wherever possible; --bind/--no-bind switch between
CPU-bound and memory-first. For a service
every instance is resized, all or nothing; a service scaled to 0 has its
record resized, by the rules an instance's resize follows, and the
instances a scale adds get that size.

Lowering memory below what an instance uses now is shrunk by its agent
guided by memory.pressure: it steps memory.high down while the container does
not stall, and sets memory.max once the use is at the target (page cache
goes; hot memory stays). If the container stalls, or the deadline passes
(the agent's --shrink-deadline), the old limits stay and the resize rolls
back with the reason.

The command waits (--wait) until every agent has applied the change. If a
host refuses it (Docker or the kernel says no), the planner rolls the
instance back to its previous allocation and the command fails with the
host's reason (exit 1).`,
		Example: `  pinfold resize web-3f2a9c0d1e --cpu +0.7 --memory +64MiB
  pinfold resize web --cpu -0.5
  pinfold resize cache --no-bind
  pinfold resize db --memory -2GiB`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			req := &pinfoldv1.ResizeRequest{Target: args[0]}
			var err error
			if cpu != "" {
				if req.CpuDelta, err = parseCPUDelta(cpu); err != nil {
					return err
				}
			}
			if memory != "" {
				if req.MemoryDeltaBytes, err = parseMemoryDelta(memory); err != nil {
					return err
				}
			}
			if req.Bind, err = bindFlag(bind, noBind); err != nil {
				return err
			}
			if cpu == "" && memory == "" && req.Bind == nil {
				return badInput("nothing to change: give --cpu, --memory, --bind or --no-bind")
			}
			if wait < 0 {
				return badInput("--wait %s: want 0 (do not wait) or more", wait)
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.Resize(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				ins := resp.Msg.Instances
				var werr error
				if wait > 0 && len(ins) > 0 { // none: a service at count 0, its record alone changed
					var progress io.Writer
					if !out.json() {
						progress = cmd.ErrOrStderr()
						fmt.Fprintf(progress, "resized %s in the plan; waiting for their hosts…\n", instances(len(ins)))
					}
					if got, err := waitApplied(cmd.Context(), cl, generations(ins), waitResize, wait, progress); got != nil {
						ins, werr = got, err
					} else {
						werr = err
					}
				}
				switch {
				case out.json():
					if err := writeJSON(cmd.OutOrStdout(), instancesJSON(ins)); err != nil {
						return err
					}
				case len(ins) == 0:
					size := "the new size"
					if r, err := cl.GetService(cmd.Context(), connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: args[0]})); err == nil {
						rec := r.Msg.GetService()
						mode := "memory-first"
						if rec.GetBind() {
							mode = "bound"
						}
						size = fmt.Sprintf("%s CPUs (%s) and %s", rec.GetCpu(), mode, alloc.FormatBytes(rec.GetMemoryBytes()))
					}
					fmt.Fprintf(cmd.OutOrStdout(), "service %s has no instances: its record is now %s, which the instances a scale adds get\n", args[0], size)
				default:
					if err := printInstances(cmd.OutOrStdout(), ins); err != nil {
						return err
					}
				}
				return werr
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, false, true, true)
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVar(&cpu, "cpu", "", "CPU change, signed: +0.7 or -0.5 (whole pieces of a CPU, at least one)")
	cmd.Flags().StringVar(&memory, "memory", "", "memory change, signed: +64MiB or -1GiB")
	cmd.Flags().BoolVar(&bind, "bind", false, "switch to CPU-bound")
	cmd.Flags().BoolVar(&noBind, "no-bind", false, "switch to memory-first")
	cmd.Flags().BoolVar(&force, "force", false, "")
	_ = cmd.Flags().MarkDeprecated("force", "it is no longer needed: memory below current use is shrunk by the agent guided by memory.pressure, or rolled back")
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "wait this long for the hosts to apply the change (0: return once planned)")
	return cmd
}

func newReplaceCmd() *cobra.Command {
	var (
		c      clientFlags
		out    outputFlag
		image  string
		batch  int
		wait   time.Duration
		health healthFlags
		pull   string
		ctr    containerFlags
	)
	cmd := &cobra.Command{
		Use:   "replace (SERVICE|INSTANCE) --image IMG [--pull missing|always] [-- COMMAND ARGS…]",
		Short: "Replace containers blue-green with a new image, on the same CPUs and memory",
		Long: `Record a new image (and optionally command) for an instance or a whole
service. No resources are planned: each host's agent pauses the old
container, starts the new one on the same allocation, and removes the old
one only after the new one is healthy; otherwise it removes the new one and
resumes the old. Every replaced instance gets new containers, also when the
image and command are unchanged (a restart, like kubectl rollout restart).
--pull always makes the host pull the image first (a re-pushed tag); the
default, missing, pulls only an image the host lacks.

Any of --volume, --restart, --label, --user, --workdir, --read-only,
--cap-add, --cap-drop, --log-driver, --log-opt replaces the container
settings as a whole (those not given are cleared: repeat the ones to
keep); with none of them each instance keeps its own.

Healthy means: the probe given here (--health-cmd, --health-tcp or
--health-http) passes within --health-timeout; else the image's own
HEALTHCHECK reports healthy; else the container keeps running for 3s.

A service is replaced host by host: --batch N hosts at a time (0: all at
once), each batch waited for before the next starts; the first failure
stops the rollout (exit 1) and leaves later hosts untouched. A service
scaled to 0 has its record changed: the instances a scale adds get it.`,
		Example: `  pinfold replace web --image nginx:1.27 --batch 1 --health-http 80/
  pinfold replace web-3f2a9c0d1e --image nginx:1.27 --health-cmd "test -f /run/ready"
  pinfold replace web --image nginx:1.27 --pull always   # restart on a re-pushed tag
  pinfold replace pg --image postgres:16 --volume pgdata:/var/lib/postgresql/data --restart always`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if image == "" {
				return badInput("--image is required")
			}
			if batch < 0 {
				return badInput("--batch %d: want 0 (all hosts at once) or more", batch)
			}
			if pull != "missing" && pull != "always" {
				return badInput("--pull %q: want missing or always", pull)
			}
			if wait < 0 {
				return badInput("--wait %s: want 0 (do not wait) or more", wait)
			}
			hc, err := health.msg()
			if err != nil {
				return err
			}
			var cs *pinfoldv1.ContainerSpec
			if ctr.given(cmd) {
				if cs, err = ctr.msg(); err != nil {
					return err
				}
				if cs == nil {
					cs = &pinfoldv1.ContainerSpec{} // every setting cleared
				}
			}
			var command []string
			if len(args) > 1 {
				command = args[1:]
			}
			var progress io.Writer
			if !out.json() {
				progress = cmd.ErrOrStderr()
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				ctx := cmd.Context()
				cur, err := allInstances(ctx, cl, "", args[0])
				if err != nil {
					return err
				}
				groups := [][]string{nil} // an instance, or all hosts at once
				if len(cur) > 0 && batch > 0 {
					groups = batches(cur, batch)
				}
				var all []*pinfoldv1.Instance
				for i, hosts := range groups {
					resp, err := cl.Replace(ctx, connect.NewRequest(&pinfoldv1.ReplaceRequest{Target: args[0], Image: image, Command: command,
						Health: hc, Hosts: hosts, Pull: pull, Container: cs}))
					if err != nil {
						return err
					}
					ins := resp.Msg.Instances
					if len(ins) == 0 { // a service at count 0: its record alone changed
						continue
					}
					if progress != nil {
						where := "their hosts"
						if hosts != nil {
							where = strings.Join(hosts, ", ")
						}
						fmt.Fprintf(progress, "batch %d/%d: replacing %s on %s with %s…\n", i+1, len(groups), instances(len(ins)), where, image)
					}
					if wait > 0 {
						t0 := time.Now()
						got, err := waitApplied(ctx, cl, generations(ins), waitReplace, wait, progress)
						if got != nil {
							ins = got
						}
						if err != nil {
							all = append(all, ins...)
							if progress != nil && i+1 < len(groups) {
								fmt.Fprintf(progress, "stopped: %d later batches not started\n", len(groups)-i-1)
							}
							_ = showInstances(cmd, out, all)
							return err
						}
						if progress != nil {
							fmt.Fprintf(progress, "batch %d/%d done in %s\n", i+1, len(groups), time.Since(t0).Round(time.Millisecond))
						}
					}
					all = append(all, ins...)
				}
				if len(all) == 0 && !out.json() {
					fmt.Fprintf(cmd.OutOrStdout(), "service %s has no instances: its record has image %s, which the instances a scale adds get\n", args[0], image)
					return nil
				}
				return showInstances(cmd, out, all)
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, false, true, true)
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVar(&image, "image", "", "the new image")
	cmd.Flags().IntVar(&batch, "batch", 0, "hosts replaced at a time for a service (0: all at once)")
	cmd.Flags().StringVar(&pull, "pull", "missing", "when hosts pull the image: missing (only when they lack it) or always")
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Minute, "wait this long for each batch (0: return once recorded)")
	health.register(cmd)
	ctr.register(cmd)
	return cmd
}

func showInstances(cmd *cobra.Command, out outputFlag, ins []*pinfoldv1.Instance) error {
	if out.json() {
		return writeJSON(cmd.OutOrStdout(), instancesJSON(ins))
	}
	return printInstances(cmd.OutOrStdout(), ins)
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

func newPsCmd() *cobra.Command {
	var (
		c             clientFlags
		out           outputFlag
		host, service string
		w             watchFlag
	)
	cmd := &cobra.Command{
		Use:   "ps [--host H] [--service S] [--watch]",
		Short: "List instances with their CPUs, NUMA node, memory and state",
		Long: `List the instances the planner placed: host, CPUs (CPU:pieces) or the
memory-first quota, NUMA node, memory, the state their host reports, and the
CPU each one used over its host's last window next to what it was given
(CPU PLANNED/GOT; GOT is '-', and cpu_got null in -o json, while the
instance is not running).
--watch redraws the list every --interval until Ctrl-C. The planner answers
a page of instances at a time (500 by default); ps walks every page, so it
lists every instance (a CLI older than the planner would show the first page
only).`,
		Example: `  pinfold ps
  pinfold ps --service web --watch
  pinfold ps --host h3 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if err := w.validate(); err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				if host != "" { // an unknown host is bad input (exit 2), not an empty list
					if _, err := cl.GetHost(cmd.Context(), connect.NewRequest(&pinfoldv1.GetHostRequest{Name: host})); err != nil {
						return err
					}
				}
				// So is a service never deployed, unless watching for it.
				if service != "" && !w.on {
					if _, err := cl.GetService(cmd.Context(), connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: service})); err != nil {
						return err
					}
				}
				return w.run(cmd, func() error {
					ins, err := allInstances(cmd.Context(), cl, host, service)
					if err != nil {
						return err
					}
					if out.json() {
						return writeJSON(cmd.OutOrStdout(), instancesJSON(ins))
					}
					return printInstances(cmd.OutOrStdout(), ins)
				})
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	w.register(cmd)
	cmd.Flags().StringVar(&host, "host", "", "only this host")
	cmd.Flags().StringVar(&service, "service", "", "only this service")
	return cmd
}

func newCapacityCmd() *cobra.Command {
	var (
		c                      clientFlags
		out                    outputFlag
		cpu, memory, service   string
		constraint             string
		bind, useBuffer        bool
		wholeCores             bool
		maxPerHost             int
		affinity, antiAffinity []string
	)
	cmd := &cobra.Command{
		Use:   "capacity --cpu X --memory SIZE [--bind] [deploy's placement flags]",
		Short: "How many instances of a size the live hosts could take (dry run)",
		Long: `Count, per host that may take work, how many instances of a size it could
take now, under the same rules and settings a deploy with the same flags
applies: the cluster's buffer (or, with --use-buffer, its overbooking),
--constraint, --affinity/--anti-affinity, --max-per-host (counting
--service's instances). A deploy of the total succeeds and one more does
not, unless a fault/upgrade domain spread limits where they may go.`,
		Example: `  pinfold capacity --cpu 1.7 --bind --memory 1GiB
  pinfold capacity --cpu 0.5 --memory 256MiB --use-buffer
  pinfold capacity --cpu 4 --bind --whole-cores --memory 8GiB
  pinfold capacity --cpu 2 --bind --memory 4GiB --constraint 'disk == "ssd"' --service web --max-per-host 2 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			perHost, err := int32Of("--max-per-host", maxPerHost, 0, math.MaxInt32)
			if err != nil {
				return err
			}
			cpuS, mem, err := parseCPUAndMemory(cpu, memory)
			if err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.Capacity(cmd.Context(), connect.NewRequest(&pinfoldv1.CapacityRequest{Cpu: cpuS, Bind: bind, WholeCores: wholeCores, MemoryBytes: mem,
					Service: service, MaxPerHost: perHost, UseBuffer: useBuffer, Constraint: constraint,
					AffinityHard: affinity, AntiAffinityHard: antiAffinity}))
				if err != nil {
					return err
				}
				// Bound instances leave the CPUs kept for memory-first
				// quotas free: say so per host, as host show does.
				kept := map[string]memoryFirstKeep{}
				if bind {
					if kept, err = keptForMemoryFirstAll(cmd.Context(), cl, resp.Msg.Capacity); err != nil {
						return err
					}
				}
				if out.json() {
					keptCPUs := map[string]int{}
					for h, k := range kept {
						keptCPUs[h] = k.Count
					}
					return writeJSON(cmd.OutOrStdout(), map[string]any{"capacity": resp.Msg.Capacity, "total_capacity": resp.Msg.Total, "limit": resp.Msg.Limit,
						"kept_for_memory_first_count": keptCPUs})
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "HOST\tCAPACITY\tLIMITED BY")
				for _, h := range slices.Sorted(maps.Keys(resp.Msg.Capacity)) {
					fmt.Fprintf(tw, "%s\t%d\t%s\n", h, resp.Msg.Capacity[h], resp.Msg.Limit[h])
				}
				fmt.Fprintf(tw, "total\t%d\t\n", resp.Msg.Total)
				if err := tw.Flush(); err != nil {
					return err
				}
				for _, h := range slices.Sorted(maps.Keys(kept)) {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", h, kept[h].explain())
				}
				return nil
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVar(&cpu, "cpu", "1", "CPUs per instance, a decimal of whole pieces (0.01 CPU at the default share base)")
	cmd.Flags().StringVar(&memory, "memory", "", "memory per instance")
	cmd.Flags().BoolVar(&bind, "bind", false, "CPU-bound instances")
	cmd.Flags().BoolVar(&wholeCores, "whole-cores", false, "count whole physical cores only, as deploy --whole-cores")
	cmd.Flags().StringVar(&service, "service", "", "the service whose instances --max-per-host and the affinity rules count")
	cmd.Flags().IntVar(&maxPerHost, "max-per-host", 0, "at most this many of --service's instances per host (0: no limit)")
	cmd.Flags().BoolVar(&useBuffer, "use-buffer", false, "may use the hosts' buffered (or overbooked) capacity, as replacements do")
	cmd.Flags().StringVar(&constraint, "constraint", "", `host properties the hosts must match, e.g. "HasSSD == true"`)
	cmd.Flags().StringArrayVar(&affinity, "affinity", nil, "only hosts running this service (repeatable)")
	cmd.Flags().StringArrayVar(&antiAffinity, "anti-affinity", nil, "never hosts running this service (repeatable)")
	_ = cmd.MarkFlagRequired("memory")
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
