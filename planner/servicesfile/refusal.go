package servicesfile

import (
	"fmt"
	"strings"
)

// plannerKeys are the planner's names of a deploy's fields, as its
// refusals start ("health http = ...", "request.max_per_host = ..."), and
// the key a pinfold services file gives each ("": the service itself).
var plannerKeys = map[string]string{
	"service": "", "request.service": "",
	"image": "image", "command entry": "command", "command and env": "command and env", "env entry": "env", "network": "network",
	"health check": "health", "health http": "health.http", "health tcp": "health.tcp", "health timeout": "health.timeout", "health port": "health",
	"cpu": "cpu", "request.cpu": "cpu", "memory": "memory", "request.memory_bytes": "memory", "memory soft limit": "memory_soft",
	"count": "count", "request.count": "count", "strategy": "strategy", "request.strategy": "strategy",
	"request.whole_cores": "whole_cores", "request.max_per_host": "max_per_host", "request.domain_spread": "domain_spread",
	"constraint": "constraint", "request.constraint": "constraint", "affinity": "affinity", "anti_affinity": "anti_affinity",
	"request.affinity.hard": "affinity", "request.affinity.soft": "soft_affinity",
	"request.anti_affinity.hard": "anti_affinity", "request.anti_affinity.soft": "soft_anti_affinity",
	"request.placement_policy": "placement_policy", "hosts_order": "hosts_order", "request.hosts_order": "hosts_order",
	"ports": "ports", "port": "ports", "volumes": "volumes", "volume": "volumes", "labels": "labels", "label": "labels", "label key": "labels",
	"user": "user", "workdir": "workdir",
}

// Refused is the planner's refusal msg of w's deploy (its message, as
// service.CheckDeploy or the API writes it) as the file names it: the
// file, the key as the file spells it and the value
// (services.hz.health.http: "abc": want PORT[/PATH], ...).
func (w Service) Refused(msg string) error {
	field, rest := "", msg
	for f := range plannerKeys {
		if r, ok := strings.CutPrefix(msg, f); ok && len(f) > len(field) && (r == "" || r[0] == ' ' || r[0] == ':') {
			field, rest = f, r
		}
	}
	if field == "" {
		rest = msg
	} else {
		rest = strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(rest, " = "), ":"), " ")
	}
	key := w.Key(plannerKeys[field])
	if w.File != "" {
		key = w.File + ": " + key
	}
	return fmt.Errorf("%s: %s", key, rest)
}
