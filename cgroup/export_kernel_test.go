//go:build linux && kernel

package cgroup

import "os"

// OpenWrite exposes openWrite to the kernel tier.
func (m *Manager) OpenWrite(p Path, name string) (*os.File, error) { return m.openWrite(p, name) }
