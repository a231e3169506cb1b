// Package statetest starts real etcd for tests: one embedded member, or a
// multi-member cluster whose members can be stopped mid-test. Only tests
// import it.
package statetest

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/pinfold/pinfold/planner/state"
)

// freePort asks the kernel for an unused loopback port.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Cluster is a running etcd cluster.
type Cluster struct {
	Members   []*embed.Etcd
	Endpoints []string
}

// Start starts an n-member etcd cluster on loopback, stopped at cleanup.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	dir := t.TempDir()
	var cfgs []state.EmbedConfig
	var initial []string
	c := &Cluster{}
	for i := range n {
		cfg := state.EmbedConfig{Name: fmt.Sprintf("m%d", i), Dir: filepath.Join(dir, fmt.Sprintf("m%d", i)),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), LogLevel: "fatal"}
		cfgs = append(cfgs, cfg)
		initial = append(initial, cfg.Name+"="+cfg.PeerURL)
		c.Endpoints = append(c.Endpoints, cfg.ClientURL)
	}
	type result struct {
		i   int
		e   *embed.Etcd
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
	c.Members = make([]*embed.Etcd, n)
	for range n {
		r := <-ch
		if r.err != nil {
			t.Fatalf("etcd member %d: %v", r.i, r.err)
		}
		c.Members[r.i] = r.e
	}
	t.Cleanup(func() {
		for _, m := range c.Members {
			if m != nil {
				m.Close()
			}
		}
	})
	return c
}

// Stop kills member i (closes it) mid-test.
func (c *Cluster) Stop(i int) {
	c.Members[i].Close()
	c.Members[i] = nil
}

// Client connects to the given endpoints (all members when none).
func (c *Cluster) Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints
	}
	cli, err := state.NewClient(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
