package model

import (
	"fmt"
	"regexp"
	"strings"
)

// The rules of a service's name, network and size that a deploy and a
// services file share (planner/service checks a deploy with them,
// planner/servicesfile a file before anything is sent).
const (
	// MaxDeployCount is the most instances one deploy may ask for: they
	// commit in one etcd transaction (about 300 bytes each), which must stay
	// well under etcd's request limit.
	MaxDeployCount = 50_000
	// MinInstanceMemory is the smallest memory an instance may have: the
	// Docker engine's smallest limit (docker.MinMemory), which agents
	// would refuse anyway.
	MinInstanceMemory = 6 << 20
)

// ValidateServiceName checks a service's name: 1..63 letters, digits,
// '-' or '_'.
func ValidateServiceName(name string) error {
	if name == "" || len(name) > 63 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
		return fmt.Errorf("service name %q: want 1..63 letters, digits, '-' or '_'", name)
	}
	return nil
}

// ValidateNewServiceName is ValidateServiceName for a service to be made:
// besides, the name may not end as an instance ID does ('-' and 10 hex
// digits), or commands that take a service or an instance (resize,
// remove, events) could not tell it from another service's instance
// (issue 36).
func ValidateNewServiceName(name string) error {
	if err := ValidateServiceName(name); err != nil {
		return err
	}
	if EndsLikeInstanceID(name) {
		return fmt.Errorf("service name %q: ends like an instance ID ('-' and %d hex digits), so commands that take a service or an instance could not tell it from one; pick another name",
			name, InstanceIDHex)
	}
	return nil
}

// networkName is Docker's rule for a network's name.
var networkName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)

// ValidateNetwork checks a Docker network mode: "" (the engine's default),
// host, none, bridge or a network's name. "container:ID" is refused: it
// would tie an instance to a container pinfold does not manage.
func ValidateNetwork(n string) error {
	if n == "" || networkName.MatchString(n) {
		return nil
	}
	return fmt.Errorf("network = %q: want host, none, bridge or a network's name (letters, digits, _ . -)", n)
}
