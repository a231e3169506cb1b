// Package statetest starts real etcd for tests: one embedded member, or a
// multi-member cluster whose members can be stopped mid-test. Only tests
// import it.
package statetest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/test/testenv"
)

// freePort is a loopback port below the ephemeral range (testenv.FreePort).
func freePort(t testing.TB) int {
	t.Helper()
	return testenv.FreePort(t)
}

// Cluster is a running etcd cluster.
type Cluster struct {
	Members   []*state.Member
	Endpoints []string
	// proxies are each member's client and peer proxies (StartProxied).
	proxies [][2]*Proxy
}

// Start starts an n-member etcd cluster on loopback, stopped at cleanup;
// each option changes every member's configuration (say, MaxTxnOps).
func Start(t testing.TB, n int, options ...func(*state.EmbedConfig)) *Cluster {
	t.Helper()
	return start(t, n, false, options)
}

// StartProxied is Start with a Proxy in front of each member's client URL
// and peer URL (the member advertises the proxies: clients and the other
// members reach it only through them), so that Freeze can make a member
// stop answering as a stopped process does. Endpoints are the proxies.
func StartProxied(t testing.TB, n int, options ...func(*state.EmbedConfig)) *Cluster {
	t.Helper()
	return start(t, n, true, options)
}

// start starts the cluster, again on fresh ports (up to three times) when a
// member's port was taken between FreePort and its bind.
func start(t testing.TB, n int, proxied bool, options []func(*state.EmbedConfig)) *Cluster {
	t.Helper()
	var err error
	for range 3 {
		var c *Cluster
		if c, err = tryStart(t, n, proxied, options); err == nil {
			return c
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		t.Logf("etcd cluster: %v; again on other ports", err)
	}
	t.Fatal(err)
	return nil
}

func tryStart(t testing.TB, n int, proxied bool, options []func(*state.EmbedConfig)) (*Cluster, error) {
	t.Helper()
	dir := t.TempDir()
	var cfgs []state.EmbedConfig
	var initial []string
	c := &Cluster{}
	for i := range n {
		cfg := state.EmbedConfig{Name: fmt.Sprintf("m%d", i), Dir: filepath.Join(dir, fmt.Sprintf("m%d", i)),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), LogLevel: "fatal"}
		if proxied {
			cp, pp := NewProxy(t, strings.TrimPrefix(cfg.ClientURL, "http://")), NewProxy(t, strings.TrimPrefix(cfg.PeerURL, "http://"))
			cfg.AdvertiseClientURL, cfg.AdvertisePeerURL = "http://"+cp.Addr(), "http://"+pp.Addr()
			c.proxies = append(c.proxies, [2]*Proxy{cp, pp})
		}
		for _, o := range options {
			o(&cfg)
		}
		cfgs = append(cfgs, cfg)
		peer, client := cfg.PeerURL, cfg.ClientURL
		if proxied {
			peer, client = cfg.AdvertisePeerURL, cfg.AdvertiseClientURL
		}
		initial = append(initial, cfg.Name+"="+peer)
		c.Endpoints = append(c.Endpoints, client)
	}
	type result struct {
		i   int
		e   *state.Member
		err error
	}
	ch := make(chan result, n)
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		go func() {
			e, err := state.StartEmbedded(cfg)
			ch <- result{i, e, err}
		}()
	}
	c.Members = make([]*state.Member, n)
	var err error
	for range n {
		r := <-ch
		if r.err != nil && err == nil {
			err = fmt.Errorf("etcd member %d: %w", r.i, r.err)
		}
		c.Members[r.i] = r.e
	}
	closeAll := func() {
		for _, m := range c.Members {
			if m != nil {
				m.Close()
			}
		}
	}
	if err != nil {
		closeAll()
		return nil, err
	}
	t.Cleanup(closeAll)
	return c, nil
}

// Freeze makes member i stop answering, as SIGSTOP would: its client and
// peer proxies stall all traffic until Thaw (StartProxied clusters only).
// The member itself runs on and still reaches the others: what it sends
// over connections it opened goes through; what it answers does not.
func (c *Cluster) Freeze(i int) {
	c.proxies[i][0].Freeze()
	c.proxies[i][1].Freeze()
}

// Thaw lets member i's stalled traffic through.
func (c *Cluster) Thaw(i int) {
	c.proxies[i][0].Thaw()
	c.proxies[i][1].Thaw()
}

// Leader is the index of the member that is the raft leader now, -1 when
// none (an election in progress).
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if m != nil && m.IsLeader() {
			return i
		}
	}
	return -1
}

// Stop kills member i (closes it) mid-test.
func (c *Cluster) Stop(i int) {
	c.Members[i].Close()
	c.Members[i] = nil
}

// Open opens a store over the given endpoints (all members when none),
// closed at cleanup.
func (c *Cluster) Open(t testing.TB, cfg state.Config, protocol int, endpoints ...string) *state.Store {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints
	}
	st, err := state.Open(context.Background(), state.Dial{Endpoints: endpoints}, cfg, protocol, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}
