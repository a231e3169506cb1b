package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	mobyclient "github.com/moby/moby/client"
)

// Labels pinfold puts on its containers.
const (
	LabelManaged  = "io.pinfold.managed" // "true"
	LabelService  = "io.pinfold.service"
	LabelInstance = "io.pinfold.instance"
	// LabelHost is the pinfold host whose agent made the container: agents
	// of several hosts may share one engine, and each touches only its own.
	LabelHost = "io.pinfold.host"
)

// engineAPI is the part of the moby client the adapter calls (signatures
// copied from github.com/moby/moby/client v0.6.2), so tests can fake it.
type engineAPI interface {
	Ping(ctx context.Context, o mobyclient.PingOptions) (mobyclient.PingResult, error)
	Info(ctx context.Context, o mobyclient.InfoOptions) (mobyclient.SystemInfoResult, error)
	ClientVersion() string
	ContainerCreate(ctx context.Context, o mobyclient.ContainerCreateOptions) (mobyclient.ContainerCreateResult, error)
	ContainerStart(ctx context.Context, id string, o mobyclient.ContainerStartOptions) (mobyclient.ContainerStartResult, error)
	ContainerInspect(ctx context.Context, id string, o mobyclient.ContainerInspectOptions) (mobyclient.ContainerInspectResult, error)
	ContainerList(ctx context.Context, o mobyclient.ContainerListOptions) (mobyclient.ContainerListResult, error)
	ContainerUpdate(ctx context.Context, id string, o mobyclient.ContainerUpdateOptions) (mobyclient.ContainerUpdateResult, error)
	ContainerPause(ctx context.Context, id string, o mobyclient.ContainerPauseOptions) (mobyclient.ContainerPauseResult, error)
	ContainerUnpause(ctx context.Context, id string, o mobyclient.ContainerUnpauseOptions) (mobyclient.ContainerUnpauseResult, error)
	ContainerStop(ctx context.Context, id string, o mobyclient.ContainerStopOptions) (mobyclient.ContainerStopResult, error)
	ContainerRemove(ctx context.Context, id string, o mobyclient.ContainerRemoveOptions) (mobyclient.ContainerRemoveResult, error)
	ImagePull(ctx context.Context, ref string, o mobyclient.ImagePullOptions) (mobyclient.ImagePullResponse, error)
	ExecCreate(ctx context.Context, id string, o mobyclient.ExecCreateOptions) (mobyclient.ExecCreateResult, error)
	ExecStart(ctx context.Context, execID string, o mobyclient.ExecStartOptions) (mobyclient.ExecStartResult, error)
	ExecInspect(ctx context.Context, execID string, o mobyclient.ExecInspectOptions) (mobyclient.ExecInspectResult, error)
}

// Adapter talks to one Docker engine.
type Adapter struct {
	api        engineAPI
	log        *slog.Logger
	apiVersion string
	driver     string // cgroupfs or systemd
	cgroupV    string
	server     string
	swapLimit  bool
}

// ErrNotFound is returned for a container that does not exist (any more).
var ErrNotFound = errors.New("no such container")

// ErrNotOwned is returned for a container without pinfold's labels.
var ErrNotOwned = errors.New("not a pinfold container")

// Connect opens a client for host ("" = DOCKER_HOST or the default socket),
// negotiates the API version and reads the cgroup driver.
func Connect(ctx context.Context, host string, log *slog.Logger) (*Adapter, error) {
	opts := []mobyclient.Opt{mobyclient.FromEnv}
	if host != "" {
		opts = append(opts, mobyclient.WithHost(host))
	}
	c, err := mobyclient.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker: client for %q: %w", host, err)
	}
	return newAdapter(ctx, c, log)
}

func newAdapter(ctx context.Context, api engineAPI, log *slog.Logger) (*Adapter, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Adapter{api: api, log: log}
	ping, err := api.Ping(ctx, mobyclient.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		return nil, fmt.Errorf("docker: engine not reachable: %w", err)
	}
	a.apiVersion = api.ClientVersion()
	info, err := api.Info(ctx, mobyclient.InfoOptions{})
	if err != nil {
		return nil, fmt.Errorf("docker: info: %w", err)
	}
	a.driver, a.cgroupV, a.server, a.swapLimit = info.Info.CgroupDriver, info.Info.CgroupVersion, info.Info.ServerVersion, info.Info.SwapLimit
	log.Info("docker engine", "server", a.server, "api", a.apiVersion, "engine_api", ping.APIVersion, "cgroup_driver", a.driver, "cgroup_version", a.cgroupV, "swap_limit", a.swapLimit)
	if !a.swapLimit {
		log.Warn("docker engine has no swap limit support: memory.swap.max must be written directly")
	}
	return a, nil
}

// APIVersion is the negotiated Engine API version.
func (a *Adapter) APIVersion() string { return a.apiVersion }

// ServerVersion is the engine's version string.
func (a *Adapter) ServerVersion() string { return a.server }

// SwapLimit reports whether the engine applies MemorySwap; when it does
// not, the caller must write memory.swap.max itself.
func (a *Adapter) SwapLimit() bool { return a.swapLimit }

// CgroupDriver is the engine's cgroup driver (cgroupfs or systemd).
func (a *Adapter) CgroupDriver() string { return a.driver }

// CreateSpec describes a new pinfold container.
type CreateSpec struct {
	Name      string
	Image     string
	Cmd       []string
	Env       []string
	Network   string // network mode: host, none, bridge, a network's name; "": the engine's default
	Service   string
	Instance  string
	Labels    map[string]string
	Resources Resources
	// CgroupParent is optional: a cgroupfs path or, under systemd, a slice.
	CgroupParent string
	// Host labels the container as made by that host's agent (LabelHost).
	Host string
	// Binds are the volumes, Docker's SOURCE:TARGET[:ro|rw]: a bind mount
	// when SOURCE is an absolute host path, a named volume otherwise (the
	// engine creates it when missing).
	Binds []string
	// Restart is the restart policy's name ("": no) and RestartRetries
	// on-failure's most retries (0: no limit).
	Restart        string
	RestartRetries int
	User           string
	Workdir        string
	ReadOnly       bool // a read-only root filesystem
	CapAdd         []string
	CapDrop        []string
	LogDriver      string // "": the engine's default
	LogOpts        map[string]string
	// Ports are published: each Container TCP port on Host of every host
	// address. Under network mode host nothing is published (the
	// container listens on the host's ports itself).
	Ports []PortMapping
}

// PortMapping publishes a container's TCP port on a host port.
type PortMapping struct {
	Host, Container int
}

// portsFor is the exposed ports and bindings that publish ports; nil for
// none or under network mode host.
func portsFor(mode string, ports []PortMapping) (network.PortSet, network.PortMap, error) {
	if len(ports) == 0 || mode == "host" {
		return nil, nil, nil
	}
	set, bind := network.PortSet{}, network.PortMap{}
	for _, p := range ports {
		if p.Host < 1 || p.Host > 65535 || p.Container < 1 || p.Container > 65535 {
			return nil, nil, &Error{Field: "port", Value: fmt.Sprintf("%d:%d", p.Host, p.Container), Reason: "host and container ports must be 1-65535"}
		}
		cp, _ := network.PortFrom(uint16(p.Container), network.TCP)
		set[cp] = struct{}{}
		bind[cp] = append(bind[cp], network.PortBinding{HostPort: strconv.Itoa(p.Host)})
	}
	return set, bind, nil
}

// Container is what the adapter reports about one container.
type Container struct {
	ID, Name, Image   string
	Cmd               []string
	Service, Instance string
	// Host is the host whose agent made it (LabelHost); "" for containers
	// made before agents labelled them.
	Host            string
	Labels          map[string]string
	PID             int
	Status          string // created, running, paused, exited, …
	Running, Paused bool
	OOMKilled       bool
	ExitCode        int
	Applied         Resources // as the daemon stored them
	CgroupPath      string    // relative to the cgroup2 mount
	// Health is the image's HEALTHCHECK state: "" (none), starting,
	// healthy or unhealthy.
	Health string
	// IP is the container's first network address ("" without a network).
	IP string
	// Network is the network mode it was created with ("default" when
	// none was asked for).
	Network string
}

// Create creates (does not start) a container with pinfold's labels.
func (a *Adapter) Create(ctx context.Context, s CreateSpec) (string, error) {
	if s.Image == "" {
		return "", &Error{Field: "image", Value: `""`, Reason: "an image is required"}
	}
	if s.Service == "" || s.Instance == "" {
		return "", &Error{Field: "service/instance", Value: fmt.Sprintf("%q/%q", s.Service, s.Instance), Reason: "both are required: they label the container as pinfold's"}
	}
	if err := s.Resources.Validate(); err != nil {
		return "", err
	}
	opts, err := createOptions(s)
	if err != nil {
		return "", err
	}
	out, err := a.api.ContainerCreate(ctx, opts)
	if err != nil {
		return "", &Error{Reason: fmt.Sprintf("create %s from %s", s.Name, s.Image), Err: err}
	}
	for _, w := range out.Warnings {
		a.log.Warn("docker create warning", "container_id", short(out.ID), "warning", w)
	}
	a.log.Debug("container created", "container_id", short(out.ID), "service", s.Service, "instance", s.Instance, "cpus", s.Resources.CPUs)
	return out.ID, nil
}

// createOptions is the engine's create request for s (API 1.41: Binds,
// RestartPolicy, CapAdd/CapDrop, LogConfig and ReadonlyRootfs are all in
// Docker 20.10's host config). pinfold's own labels win over s.Labels.
func createOptions(s CreateSpec) (mobyclient.ContainerCreateOptions, error) {
	labels := maps.Clone(s.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManaged], labels[LabelService], labels[LabelInstance] = "true", s.Service, s.Instance
	if s.Host != "" {
		labels[LabelHost] = s.Host
	}
	res := resourcesFor(s.Resources)
	res.CgroupParent = s.CgroupParent
	exposed, bindings, err := portsFor(s.Network, s.Ports)
	if err != nil {
		return mobyclient.ContainerCreateOptions{}, err
	}
	hc := &container.HostConfig{Resources: res, NetworkMode: container.NetworkMode(s.Network), PortBindings: bindings,
		Binds: s.Binds, ReadonlyRootfs: s.ReadOnly, CapAdd: s.CapAdd, CapDrop: s.CapDrop}
	if s.Restart != "" {
		hc.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyMode(s.Restart), MaximumRetryCount: s.RestartRetries}
	}
	if s.LogDriver != "" || len(s.LogOpts) > 0 {
		hc.LogConfig = container.LogConfig{Type: s.LogDriver, Config: s.LogOpts}
	}
	return mobyclient.ContainerCreateOptions{
		Name:       s.Name,
		Config:     &container.Config{Image: s.Image, Cmd: s.Cmd, Env: s.Env, Labels: labels, User: s.User, WorkingDir: s.Workdir, ExposedPorts: exposed},
		HostConfig: hc,
	}, nil
}

// Pull pulls image from its registry and waits until the engine has it.
func (a *Adapter) Pull(ctx context.Context, image string) error {
	if image == "" {
		return &Error{Field: "image", Value: `""`, Reason: "an image is required"}
	}
	r, err := a.api.ImagePull(ctx, image, mobyclient.ImagePullOptions{})
	if err != nil {
		return &Error{Reason: "pull " + image, Err: err}
	}
	defer r.Close()
	if err := r.Wait(ctx); err != nil {
		return &Error{Reason: "pull " + image, Err: err}
	}
	a.log.Info("image pulled", "image", image)
	return nil
}

// IsNoImage reports whether err is the engine saying it lacks an image.
func IsNoImage(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "No such image") || strings.Contains(err.Error(), "no such image"))
}

// Start starts a pinfold container.
func (a *Adapter) Start(ctx context.Context, id string) error {
	if _, err := a.owned(ctx, id); err != nil {
		return err
	}
	if _, err := a.api.ContainerStart(ctx, id, mobyclient.ContainerStartOptions{}); err != nil {
		return a.wrap(id, "start", err)
	}
	return nil
}

// Inspect reports one container (pinfold's or not).
func (a *Adapter) Inspect(ctx context.Context, id string) (Container, error) {
	r, err := a.api.ContainerInspect(ctx, id, mobyclient.ContainerInspectOptions{})
	if err != nil {
		return Container{}, a.wrap(id, "inspect", err)
	}
	return a.fromInspect(r.Container)
}

func (a *Adapter) fromInspect(in container.InspectResponse) (Container, error) {
	c := Container{ID: in.ID, Name: strings.TrimPrefix(in.Name, "/")}
	if in.Config != nil {
		c.Image, c.Labels, c.Cmd = in.Config.Image, in.Config.Labels, in.Config.Cmd
		c.Service, c.Instance, c.Host = c.Labels[LabelService], c.Labels[LabelInstance], c.Labels[LabelHost]
	}
	if st := in.State; st != nil {
		c.PID, c.Status, c.Running, c.Paused, c.OOMKilled, c.ExitCode = st.Pid, string(st.Status), st.Running, st.Paused, st.OOMKilled, st.ExitCode
		if st.Health != nil {
			c.Health = string(st.Health.Status)
		}
	}
	if ns := in.NetworkSettings; ns != nil {
		for _, name := range slices.Sorted(maps.Keys(ns.Networks)) {
			if ep := ns.Networks[name]; ep != nil && ep.IPAddress.IsValid() {
				c.IP = ep.IPAddress.String()
				break
			}
		}
	}
	if in.HostConfig != nil {
		c.Network = string(in.HostConfig.NetworkMode)
	}
	applied, err := appliedFrom(in.HostConfig)
	if err != nil {
		return c, &Error{Container: in.ID, Reason: "the daemon reports an unreadable cpuset", Err: err}
	}
	c.Applied = applied
	parent := ""
	if in.HostConfig != nil {
		parent = in.HostConfig.CgroupParent
	}
	if c.CgroupPath, err = CgroupPath(a.driver, parent, in.ID); err != nil {
		return c, err
	}
	return c, nil
}

// List returns pinfold's containers (running or not), sorted by name.
func (a *Adapter) List(ctx context.Context) ([]Container, error) {
	r, err := a.api.ContainerList(ctx, mobyclient.ContainerListOptions{All: true,
		Filters: make(mobyclient.Filters).Add("label", LabelManaged+"=true")})
	if err != nil {
		return nil, &Error{Reason: "list containers", Err: err}
	}
	var out []Container
	for _, s := range r.Items {
		c, err := a.Inspect(ctx, s.ID)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the list
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Update changes a pinfold container's resources live (no restart) and
// returns what the daemon stored afterwards. Invalid resources, a vanished
// container or one that is not pinfold's change nothing.
func (a *Adapter) Update(ctx context.Context, id string, r Resources) (Container, error) {
	if err := r.Validate(); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Container = id
		}
		return Container{}, err
	}
	if _, err := a.owned(ctx, id); err != nil {
		return Container{}, err
	}
	res := resourcesFor(r)
	t0 := time.Now()
	up, err := a.api.ContainerUpdate(ctx, id, mobyclient.ContainerUpdateOptions{Resources: &res})
	if err != nil {
		return Container{}, a.wrap(id, "update", err)
	}
	for _, w := range up.Warnings {
		a.log.Warn("docker update warning", "container_id", short(id), "warning", w)
	}
	a.log.Debug("container updated", "container_id", short(id), "cpus", r.CPUs, "mems", r.Mems, "took", time.Since(t0))
	return a.Inspect(ctx, id)
}

// Exec runs cmd in a running pinfold container and waits for it (a health
// probe): it returns the exit code.
func (a *Adapter) Exec(ctx context.Context, id string, cmd []string) (int, error) {
	if len(cmd) == 0 {
		return 0, &Error{Container: id, Field: "exec", Value: "[]", Reason: "a command is required"}
	}
	if _, err := a.owned(ctx, id); err != nil {
		return 0, err
	}
	ex, err := a.api.ExecCreate(ctx, id, mobyclient.ExecCreateOptions{Cmd: cmd})
	if err != nil {
		return 0, a.wrap(id, "exec create", err)
	}
	if _, err := a.api.ExecStart(ctx, ex.ID, mobyclient.ExecStartOptions{Detach: true}); err != nil {
		return 0, a.wrap(id, "exec start", err)
	}
	for {
		r, err := a.api.ExecInspect(ctx, ex.ID, mobyclient.ExecInspectOptions{})
		if err != nil {
			return 0, a.wrap(id, "exec inspect", err)
		}
		if !r.Running {
			return r.ExitCode, nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Pause freezes a pinfold container; Unpause thaws it.
func (a *Adapter) Pause(ctx context.Context, id string) error {
	if _, err := a.owned(ctx, id); err != nil {
		return err
	}
	_, err := a.api.ContainerPause(ctx, id, mobyclient.ContainerPauseOptions{})
	return a.wrap(id, "pause", err)
}

// Unpause thaws a paused pinfold container.
func (a *Adapter) Unpause(ctx context.Context, id string) error {
	if _, err := a.owned(ctx, id); err != nil {
		return err
	}
	_, err := a.api.ContainerUnpause(ctx, id, mobyclient.ContainerUnpauseOptions{})
	return a.wrap(id, "unpause", err)
}

// Stop stops a pinfold container, killing it after grace.
func (a *Adapter) Stop(ctx context.Context, id string, grace time.Duration) error {
	if _, err := a.owned(ctx, id); err != nil {
		return err
	}
	secs := int(grace.Seconds())
	_, err := a.api.ContainerStop(ctx, id, mobyclient.ContainerStopOptions{Timeout: &secs})
	return a.wrap(id, "stop", err)
}

// Remove force-removes a pinfold container; a container already gone is not an error.
func (a *Adapter) Remove(ctx context.Context, id string) error {
	if _, err := a.owned(ctx, id); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	_, err := a.api.ContainerRemove(ctx, id, mobyclient.ContainerRemoveOptions{Force: true})
	if err != nil && cerrdefs.IsNotFound(err) {
		return nil
	}
	return a.wrap(id, "remove", err)
}

// owned inspects id and refuses containers without pinfold's label.
func (a *Adapter) owned(ctx context.Context, id string) (Container, error) {
	c, err := a.Inspect(ctx, id)
	if err != nil {
		return c, err
	}
	if c.Labels[LabelManaged] != "true" {
		return c, &Error{Container: id, Reason: fmt.Sprintf("has no %s=true label; pinfold never touches containers it does not own", LabelManaged), Err: ErrNotOwned}
	}
	return c, nil
}

// IsTransient reports whether err is the engine being unreachable or slow
// (retry later) rather than the engine refusing the request.
func IsTransient(err error) bool {
	var ne net.Error
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || mobyclient.IsErrConnectionFailed(err) ||
		cerrdefs.IsUnavailable(err) || cerrdefs.IsDeadlineExceeded(err) || errors.As(err, &ne)
}

func (a *Adapter) wrap(id, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerrdefs.IsNotFound(err) {
		return &Error{Container: id, Reason: op, Err: ErrNotFound}
	}
	return &Error{Container: id, Reason: op + " refused by the engine", Err: err}
}
