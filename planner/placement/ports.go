package placement

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
)

// RulePorts: a host where a static host port the request asks for is held
// already, or without enough free ports in the dynamic range, takes none
// of it. It is hard. A request with a static port also places at most one
// new instance on a host: two would hold one port.
const RulePorts Rule = "Ports"

// portsFree reports whether host h can give one instance of r its ports:
// every static one free, and enough free in the dynamic range.
func portsFree(r Request, h *Host) bool {
	held := h.Resources.Ports
	for _, p := range model.StaticPorts(r.Ports) {
		if held[p] > 0 {
			return false
		}
	}
	return dynamicFree(r, h) >= model.Dynamic(r.Ports)
}

// dynamicFree is how many ports of the dynamic range h holds none of,
// less r's static ports inside the range.
func dynamicFree(r Request, h *Host) int {
	n := model.DynamicPortMax - model.DynamicPortMin + 1
	for p, c := range h.Resources.Ports {
		if c > 0 && p >= model.DynamicPortMin && p <= model.DynamicPortMax {
			n--
		}
	}
	for _, p := range model.StaticPorts(r.Ports) {
		if p >= model.DynamicPortMin && p <= model.DynamicPortMax && h.Resources.Ports[p] == 0 {
			n--
		}
	}
	return n
}

// portsDetail says what the ports rule asked of every host, for a refusal:
// "no host has port 8080 free".
func portsDetail(r Request) string {
	var parts []string
	static := model.StaticPorts(r.Ports)
	switch len(static) {
	case 0:
	case 1:
		parts = append(parts, "port "+strconv.Itoa(static[0])+" free")
	default:
		s := make([]string, len(static))
		for i, p := range static {
			s[i] = strconv.Itoa(p)
		}
		parts = append(parts, "ports "+strings.Join(s, ", ")+" free")
	}
	if d := model.Dynamic(r.Ports); d > 0 {
		ports := "ports"
		if d == 1 {
			ports = "port"
		}
		parts = append(parts, fmt.Sprintf("%d free %s in %d-%d", d, ports, model.DynamicPortMin, model.DynamicPortMax))
	}
	return "no host has " + strings.Join(parts, " and ")
}

// staticCap is 1 when r asks for a static port (no host takes two new
// instances), else -1 (no cap).
func staticCap(r Request) int {
	if len(model.StaticPorts(r.Ports)) > 0 {
		return 1
	}
	return -1
}

// assignPorts gives each placement of ar its host ports on its host:
// static ones as asked, dynamic ones the lowest free in the range (those
// an earlier placement of the same request took on the host are held).
// Deterministic.
func assignPorts(r Request, hosts []*Host, ar *alloc.Result) error {
	if len(r.Ports) == 0 {
		return nil
	}
	byName := make(map[string]*Host, len(hosts))
	for _, h := range hosts {
		byName[h.Name] = h
	}
	taken := map[string]map[int]bool{}
	for i := range ar.Placements {
		p := &ar.Placements[i]
		h := byName[p.Host]
		if taken[p.Host] == nil {
			taken[p.Host] = map[int]bool{}
		}
		t := taken[p.Host]
		used := func(port int) bool { return t[port] || h != nil && h.Resources.Ports[port] > 0 }
		for _, s := range model.StaticPorts(r.Ports) {
			if used(s) {
				return fmt.Errorf("host %s: port %d is held (placement defect: the %s rule should have eliminated it)", p.Host, s, RulePorts)
			}
		}
		got, ok := model.AssignPorts(r.Ports, used)
		if !ok {
			return fmt.Errorf("host %s: %s: %d new instances of %s do not find their ports there", p.Host, portsDetail(r), len(ar.Placements), r.Service)
		}
		for _, q := range got {
			t[q.Host] = true
		}
		p.HostPorts = got
	}
	return nil
}
