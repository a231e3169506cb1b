//go:build !linux

package cgroup

import "errors"

// HostMount is where the unified hierarchy is mounted on Linux.
const HostMount = "/sys/fs/cgroup"

// OpenHost is only supported on Linux.
func OpenHost(parent string, opts ...Option) (*Manager, error) { return nil, errors.ErrUnsupported }
