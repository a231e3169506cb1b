// Package checkpoint is the agent's on-disk copy of the last desired state
// the planner sent: a versioned, checksummed JSON file written atomically
// (temporary file, fsync, rename, fsync of the directory). An agent started
// while the planner is unreachable enforces it until the planner answers.
// A missing, corrupt or foreign checkpoint is an error the agent logs before
// waiting for the planner; it never trusts a bad one.
package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// Version is the checkpoint format version (1: what was applied, unused).
const Version = 2

// FileName is the checkpoint's name inside the state directory.
const FileName = "checkpoint.json"

// State is the checkpoint's content: the host's desired state as the
// planner last sent it.
type State struct {
	Host string `json:"host"`
	// Revision is the planner store's revision the desired state was read at.
	Revision int64 `json:"revision"`
	// ShareBase is the planner's pieces per CPU.
	ShareBase int `json:"share_base"`
	// CPUs are the host's CPUs in the planner's capacity.
	CPUs cpuset.CPUs `json:"cpus"`
	// Pool is the planner's memory-first shared pool (empty: not sent).
	Pool cpuset.CPUs `json:"shared_pool"`
	// Desired are the host's desired instances.
	Desired []model.Instance `json:"desired"`
}

type envelope struct {
	Version int             `json:"version"`
	SHA256  string          `json:"sha256"`
	Data    json.RawMessage `json:"data"`
}

// ErrNone means there is no checkpoint yet.
var ErrNone = errors.New("checkpoint: none")

// Save writes s to dir atomically.
func Save(dir string, s State) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("checkpoint: encode: %w", err)
	}
	sum := sha256.Sum256(data)
	b, _ := json.Marshal(envelope{Version: Version, SHA256: hex.EncodeToString(sum[:]), Data: data})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(dir, FileName+".tmp*")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("checkpoint: write %s: %w", tmp.Name(), err)
	}
	// The data must be on disk before the rename makes it the checkpoint.
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("checkpoint: fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, FileName)); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Load reads and verifies the checkpoint in dir.
func Load(dir string) (State, error) {
	p := filepath.Join(dir, FileName)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, ErrNone
	}
	if err != nil {
		return State{}, fmt.Errorf("checkpoint: %w", err)
	}
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return State{}, fmt.Errorf("checkpoint: %s is not a checkpoint: %w", p, err)
	}
	if e.Version != Version {
		return State{}, fmt.Errorf("checkpoint: %s has version %d, want %d", p, e.Version, Version)
	}
	sum := sha256.Sum256(e.Data)
	if hex.EncodeToString(sum[:]) != e.SHA256 {
		return State{}, fmt.Errorf("checkpoint: %s: checksum mismatch (corrupt)", p)
	}
	var s State
	if err := json.Unmarshal(e.Data, &s); err != nil {
		return State{}, fmt.Errorf("checkpoint: %s: %w", p, err)
	}
	return s, nil
}
