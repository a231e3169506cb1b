package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/model"
)

// Probe is a configured health check: exactly one of Exec, TCP, HTTP.
type Probe struct {
	Exec    []string      // run in the container; exit 0 = healthy
	TCP     int           // port on the container's address accepts a connection
	HTTP    string        // "PORT[/PATH]": GET answers 2xx or 3xx
	Timeout time.Duration // 0: Config.HealthTimeout
	// Missing is a port the check names that the instance does not hold
	// (never sent by a planner that validated it): the check fails.
	Missing string
}

// probeOf is the probe of an instance's health check (nil: none). A check
// naming one of the instance's ports goes to that port's container port:
// alone a TCP check, with HTTP (a bare /PATH) an HTTP one.
func probeOf(in *model.Instance) *Probe {
	h := in.Health
	if h == nil || len(h.Exec) == 0 && h.TCP == 0 && h.HTTP == "" && h.Port == "" {
		return nil
	}
	p := &Probe{Exec: h.Exec, TCP: h.TCP, HTTP: h.HTTP}
	if h.Port != "" {
		port, ok := model.PortOf(in.HostPorts, h.Port)
		if !ok {
			return &Probe{Missing: h.Port}
		}
		if h.HTTP != "" {
			p.HTTP = strconv.Itoa(port.Container) + h.HTTP
		} else {
			p.TCP = port.Container
		}
	}
	p.Timeout, _ = time.ParseDuration(h.Timeout) // validated by the planner
	return p
}

// check runs the probe once against container c. One attempt may take
// until ctx's deadline (the probe's whole timeout): a slow exec on a busy
// host is an answer, not a failure.
func (p *Probe) check(ctx context.Context, eng engine, c docker.Container) error {
	// Without a network of its own the container shares an address with
	// the host (network mode host) or has none (then TCP/HTTP fail).
	addr := c.IP
	if addr == "" {
		addr = "127.0.0.1"
	}
	switch {
	case p.Missing != "":
		return fmt.Errorf("health port %q: the instance holds no such port", p.Missing)
	case len(p.Exec) > 0:
		code, err := eng.Exec(ctx, c.ID, p.Exec)
		if err != nil {
			return fmt.Errorf("exec probe (%s, arguments not shown: they may hold a secret): %w", probeName(p.Exec), err)
		}
		if code != 0 {
			return fmt.Errorf("exec probe (%s, arguments not shown: they may hold a secret) exited %d", probeName(p.Exec), code)
		}
		return nil
	case p.TCP != 0:
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(addr, strconv.Itoa(p.TCP)))
		if err != nil {
			return fmt.Errorf("tcp %d: %w", p.TCP, err)
		}
		return conn.Close()
	case p.HTTP != "":
		port, path, _ := strings.Cut(p.HTTP, "/")
		url := "http://" + net.JoinHostPort(addr, port) + "/" + path
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("http %s: %w", url, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("http %s: %w", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("http %s: status %d", url, resp.StatusCode)
		}
		return nil
	}
	return errors.New("empty probe")
}

// probeName is an exec probe's program, without its arguments: an error
// is reported to the planner, whose event log and instance errors viewers
// read (issue 36: a probe's header with a key reached a viewer).
func probeName(argv []string) string {
	if len(argv) == 0 {
		return "none"
	}
	return argv[0]
}
