package model

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// portName is the rule for a port's name.
var portName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// MaxPorts bounds the ports of one instance.
const MaxPorts = 16

// String is p in the deploy flag's syntax: "http" (dynamic), "http:80"
// (dynamic, container port 80), "http=8080" (static), "http=8080:80".
func (p Port) String() string {
	s := p.Name
	if p.Host != 0 {
		s += "=" + strconv.Itoa(p.Host)
	}
	if p.Container != 0 {
		s += ":" + strconv.Itoa(p.Container)
	}
	return s
}

// ParsePort reads a port in the deploy flag's syntax (Port.String); the
// result still needs ValidatePorts.
func ParsePort(s string) (Port, error) {
	name, rest, static := strings.Cut(s, "=")
	var p Port
	hostS, contS, hasCont := rest, "", false
	if static {
		hostS, contS, hasCont = strings.Cut(rest, ":")
	} else {
		name, contS, hasCont = strings.Cut(s, ":")
	}
	p.Name = name
	num := func(what, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("port %q: %s port %q is not a number", s, what, v)
		}
		if n < 1 || n > 65535 {
			return 0, fmt.Errorf("port %q: port %d is outside 1-65535", s, n)
		}
		return n, nil
	}
	var err error
	if static {
		if p.Host, err = num("host", hostS); err != nil {
			return Port{}, err
		}
	}
	if hasCont {
		if p.Container, err = num("container", contS); err != nil {
			return Port{}, err
		}
	}
	return p, nil
}

// ValidatePorts checks the ports a spec asks for: each name matches
// [a-z][a-z0-9_-]* (at most 32 characters) and is unique, each port given
// is in 1-65535, no static host port is asked twice, and under network
// mode host (where nothing is published) a container port, when given,
// equals the host port. Errors name the port as the deploy flag writes it.
func ValidatePorts(ports []Port, network string) error {
	if len(ports) > MaxPorts {
		return fmt.Errorf("ports: %d given, want at most %d", len(ports), MaxPorts)
	}
	names := map[string]bool{}
	envs := map[string]string{}
	static := map[int]string{}
	for _, p := range ports {
		switch {
		case !portName.MatchString(p.Name):
			return fmt.Errorf("port %q: name %q: want [a-z][a-z0-9_-]*, at most 32 characters", p.String(), p.Name)
		case names[p.Name]:
			return fmt.Errorf("port %q: name %q is given twice", p.String(), p.Name)
		case envs[PortEnv(p.Name)] != "":
			return fmt.Errorf("port %q: name %q reaches the container as %s, as port %q does", p.String(), p.Name, PortEnv(p.Name), envs[PortEnv(p.Name)])
		case p.Host < 0 || p.Host > 65535:
			return fmt.Errorf("port %q: port %d is outside 1-65535", p.String(), p.Host)
		case p.Container < 0 || p.Container > 65535:
			return fmt.Errorf("port %q: container port %d is outside 1-65535", p.String(), p.Container)
		case network == "host" && p.Container != 0 && p.Host != 0 && p.Container != p.Host:
			return fmt.Errorf("port %q: under network host the container listens on the host port: want no container port, or %d", p.String(), p.Host)
		case network == "host" && p.Container != 0 && p.Host == 0:
			return fmt.Errorf("port %q: under network host the container listens on the host port, which is dynamic: want no container port", p.String())
		}
		if p.Host != 0 {
			if other, ok := static[p.Host]; ok {
				return fmt.Errorf("port %q: host port %d is also asked by port %q", p.String(), p.Host, other)
			}
			static[p.Host] = p.Name
		}
		names[p.Name] = true
		envs[PortEnv(p.Name)] = p.Name
	}
	return nil
}

// StaticPorts are the static host ports ports ask for, in their order.
func StaticPorts(ports []Port) []int {
	var out []int
	for _, p := range ports {
		if p.Host != 0 {
			out = append(out, p.Host)
		}
	}
	return out
}

// Dynamic counts the dynamic ports of ports.
func Dynamic(ports []Port) int {
	n := 0
	for _, p := range ports {
		if p.Host == 0 {
			n++
		}
	}
	return n
}

// AssignPorts gives each port of want a host port: a static one its own,
// each dynamic one the lowest port of DynamicPortMin..DynamicPortMax that
// used does not hold and no earlier port took; the container port
// defaults to the host port. It reports false when the range runs out.
// used is not changed. Pure and deterministic.
func AssignPorts(want []Port, used func(port int) bool) ([]Port, bool) {
	if len(want) == 0 {
		return nil, true
	}
	taken := map[int]bool{}
	for _, p := range want {
		if p.Host != 0 {
			taken[p.Host] = true
		}
	}
	out := make([]Port, len(want))
	next := DynamicPortMin
	for i, p := range want {
		if p.Host == 0 {
			for next <= DynamicPortMax && (used(next) || taken[next]) {
				next++
			}
			if next > DynamicPortMax {
				return nil, false
			}
			p.Host = next
			taken[next] = true
		}
		if p.Container == 0 {
			p.Container = p.Host
		}
		out[i] = p
	}
	return out, true
}

// PortsEnv is the environment that passes each of hostPorts to the
// container: PortEnv(name)=host port.
func PortsEnv(hostPorts []Port) []string {
	var out []string
	for _, p := range hostPorts {
		out = append(out, PortEnv(p.Name)+"="+strconv.Itoa(p.Host))
	}
	return out
}
