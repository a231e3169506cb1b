package planner_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/planner"
)

// TestSecondPlannerOnADataDirIsRefused: a second planner (or 'pinfold up')
// on a data dir a running planner uses is refused at once, naming the
// directory, and leaves the running planner's embedded etcd certificates
// alone. Before, it replaced DATA-DIR/etcd-tls (the running etcd's CA and
// certificates) and then waited forever for etcd's database lock, silently.
func TestSecondPlannerOnADataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := embedded(t, dir)
	p, err := planner.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ca := filepath.Join(dir, "etcd-tls", "ca.pem")
	before, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	second := cfg
	second.EtcdClientURL, second.EtcdPeerURL = freeURL(t), freeURL(t)
	done := make(chan error, 1)
	go func() {
		q, err := planner.Start(context.Background(), second)
		if err == nil {
			q.Close()
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second): // a deadlock detector, not a speed bound
		err = errors.New("still starting after 30 s")
	}
	var se *planner.StoreError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second planner on the data dir = %v, want a StoreError saying %s is in use", err, dir)
	}
	if after, err := os.ReadFile(ca); err != nil || !bytes.Equal(before, after) {
		t.Errorf("the running planner's etcd CA was replaced or removed (%v)", err)
	}
	p.Close()
	// Once the first one stopped, the data dir is free again.
	q, err := planner.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start after the first planner stopped: %v", err)
	}
	q.Close()
}
