// Package checkpoint is the agent's on-disk cache of what it last applied:
// a versioned, checksummed JSON file written atomically (temporary file,
// fsync, rename, fsync of the directory). A missing, corrupt or foreign
// checkpoint is an error the agent logs before rebuilding from Docker's
// labelled containers and the desired state; it never trusts a bad one.
package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Version is the checkpoint format version.
const Version = 1

// FileName is the checkpoint's name inside the state directory.
const FileName = "checkpoint.json"

// Applied is what the agent applied for one instance.
type Applied struct {
	ContainerID string `json:"container_id"`
	Generation  int64  `json:"generation"`
	CPUs        string `json:"cpus"`
	Mems        string `json:"mems"`
	CPUQuota    int64  `json:"cpu_quota"`
	CPUWeight   uint64 `json:"cpu_weight"`
	Memory      int64  `json:"memory_bytes"`
}

// State is the checkpoint's content.
type State struct {
	Host    string             `json:"host"`
	Applied map[string]Applied `json:"applied"` // by instance ID
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
