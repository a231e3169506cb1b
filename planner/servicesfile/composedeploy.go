package servicesfile

import (
	"fmt"
	"strings"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
)

// composePlacement is a compose deploy's placement: swarm's constraints,
// preferences and per-node cap.
type composePlacement struct {
	Constraints        []string `json:"constraints"`
	MaxReplicasPerNode *int64   `json:"max_replicas_per_node"`
}

// composeDeployRules maps deploy.mode, deploy.placement.constraints and
// deploy.placement.max_replicas_per_node onto want (whose x-pinfold- keys
// are read) and returns the instance count: the service's scale or
// deploy.replicas (both: the same number, as compose wants), or 1 per host
// for mode global (strategy each). named gets the keys of what it sets. A
// value pinfold cannot honour is an error naming its key and value.
func composeDeployRules(path string, dp *composeDeploy, scale *int64, want *model.Deploy, named map[string]string) (int, error) {
	count := 1
	if scale != nil {
		if *scale < 0 || *scale > model.MaxDeployCount {
			return 0, fmt.Errorf("%s.scale: %d: want 0 to %d", path, *scale, model.MaxDeployCount)
		}
		if dp != nil && dp.Replicas != nil && *dp.Replicas != *scale {
			return 0, fmt.Errorf("%s.scale: %d: deploy.replicas says %d: compose refuses two counts, give one of them", path, *scale, *dp.Replicas)
		}
		if dp != nil && dp.Mode == "global" {
			return 0, fmt.Errorf("%s.scale: %d: deploy.mode global runs one instance per host: remove one of the keys", path, *scale)
		}
		count, named["count"] = int(*scale), path+".scale"
	}
	if dp == nil {
		return count, nil
	}
	if dp.Replicas != nil {
		if *dp.Replicas < 0 || *dp.Replicas > model.MaxDeployCount {
			return 0, fmt.Errorf("%s.deploy.replicas: %d: want 0 to %d", path, *dp.Replicas, model.MaxDeployCount)
		}
		count = int(*dp.Replicas)
	}
	switch dp.Mode {
	case "", "replicated":
	case "global":
		if dp.Replicas != nil {
			return 0, fmt.Errorf("%s.deploy.replicas: %d: deploy.mode global runs one instance per host: compose refuses both keys, remove one", path, *dp.Replicas)
		}
		if s := want.Strategy; s != "" && s != "each" {
			return 0, fmt.Errorf("%s: %q: deploy.mode global is strategy each", named["strategy"], s)
		}
		want.Strategy, count = "each", 1
		named["strategy"], named["count"] = path+".deploy.mode", path+".deploy.mode"
	default:
		return 0, fmt.Errorf("%s.deploy.mode: %q: want replicated or global (pinfold runs services, not jobs)", path, dp.Mode)
	}
	if n := dp.Placement.MaxReplicasPerNode; n != nil {
		key := path + ".deploy.placement.max_replicas_per_node"
		switch {
		case want.MaxPerHost != 0:
			return 0, fmt.Errorf("%s: %d: %s says %d: give one of them", key, *n, named["max_per_host"], want.MaxPerHost)
		case *n < 0 || *n > model.MaxMaxPerHost:
			return 0, fmt.Errorf("%s: %d: want 0 (no cap) to %d", key, *n, model.MaxMaxPerHost)
		}
		want.MaxPerHost, named["max_per_host"] = int(*n), key
	}
	var exprs []string
	for i, c := range dp.Placement.Constraints {
		e, err := composeConstraint(c)
		if err != nil {
			return 0, fmt.Errorf("%s.deploy.placement.constraints[%d]: %q: %v", path, i, c, err)
		}
		exprs = append(exprs, e)
	}
	if len(exprs) > 0 {
		want.Rules.Constraint, named["constraint"] = strings.Join(exprs, " && "), path+".deploy.placement.constraints"
	}
	return count, nil
}

// composeRefuseResources refuses the reservations of deploy.resources a
// container needs to run as the file says and pinfold cannot give:
// devices (a GPU job run without its GPU fails, or runs on the CPU,
// worse than not at all) and generic resources, by their path and value.
// An empty list is what pinfold runs: no refusal.
func composeRefuseResources(path string, dp *composeDeploy) error {
	if dp == nil {
		return nil
	}
	r := dp.Resources.Reservations
	switch key := path + ".deploy.resources.reservations"; {
	case len(r.Devices) > 0:
		return fmt.Errorf("%s.devices: %s: pinfold passes no devices (GPUs or others) into a container, and one run without the devices it reserves is not the file's: remove the key, or run the service outside pinfold", key, cutText(rawList(r.Devices), 80))
	case len(r.GenericResources) > 0:
		return fmt.Errorf("%s.generic_resources: %s: pinfold plans CPUs and memory only (no generic resources such as GPUs): remove the key, or run the service outside pinfold", key, cutText(rawList(r.GenericResources), 80))
	}
	return nil
}

// composeConstraint is a swarm placement constraint (NAME == VALUE or
// NAME != VALUE) in pinfold's constraint language: node.labels.KEY is the
// host property KEY (pinfold host set --property KEY=VALUE), node.hostname
// the host's name, each compared as text, as swarm compares them. Swarm's
// other names (node.id, node.role, node.platform.*, engine.labels.*) have
// no pinfold counterpart: an error says so.
func composeConstraint(c string) (string, error) {
	lhs, rhs, op := "", "", ""
	for _, o := range []string{"==", "!="} {
		if l, r, ok := strings.Cut(c, o); ok {
			lhs, rhs, op = strings.TrimSpace(l), strings.TrimSpace(r), o
			break
		}
	}
	if op == "" || lhs == "" || rhs == "" {
		return "", fmt.Errorf("want NAME == VALUE or NAME != VALUE")
	}
	prop := ""
	switch {
	case lhs == "node.hostname":
		prop = "HostName"
	case strings.HasPrefix(lhs, "node.labels."):
		prop = strings.TrimPrefix(lhs, "node.labels.")
	default:
		return "", fmt.Errorf("pinfold hosts have no %s: pinfold maps node.labels.KEY (a host property) and node.hostname", lhs)
	}
	if strings.ContainsAny(rhs, `"'`) {
		return "", fmt.Errorf("a value with a quote pinfold cannot write as a constraint")
	}
	e := prop + " " + op + ` "` + rhs + `"`
	if _, err := placement.Parse(e); err != nil {
		return "", fmt.Errorf("no pinfold constraint: %w", err)
	}
	return e, nil
}
