package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// SystemdOwnsTree reports whether systemd is PID 1 and so owns the cgroup
// tree (sd_booted(3): /run/systemd/system exists).
func SystemdOwnsTree() bool {
	st, err := os.Lstat("/run/systemd/system")
	return err == nil && st.IsDir()
}

var unitRE = regexp.MustCompile(`^[A-Za-z0-9:_.\\-]+\.(slice|scope)$`)

// scopeProperties are the D-Bus properties of pinfold's transient scope: in
// slice, holding pid, with Delegate=yes so the cgroup subtree below the
// scope is pinfold's to manage (systemd.resource-control(5), "Delegate=").
func scopeProperties(slice string, pid int) []sddbus.Property {
	return []sddbus.Property{
		sddbus.PropDescription("pinfold managed cgroups"),
		sddbus.PropSlice(slice),
		sddbus.PropPids(uint32(pid)),
		{Name: "Delegate", Value: godbus.MakeVariant(true)},
		{Name: "DefaultDependencies", Value: godbus.MakeVariant(false)},
	}
}

// SystemdScope asks systemd (over D-Bus) for a transient scope unit named
// scope in slice (systemd creates the slice on demand), containing process
// pid, with Delegate=yes. It returns the scope's cgroup path relative to the
// mount ("pinfold.slice/pinfold-agent.scope"); pass it to Open as the parent
// once pid has moved into a leaf below it (no internal processes). An
// existing scope is reused.
func SystemdScope(ctx context.Context, slice, scope string, pid int) (string, error) {
	for _, u := range []string{slice, scope} {
		if !unitRE.MatchString(u) {
			return "", fmt.Errorf("cgroup: systemd unit name %q: want letters, digits and :_.- ending in .slice or .scope", u)
		}
	}
	if !strings.HasSuffix(slice, ".slice") || !strings.HasSuffix(scope, ".scope") {
		return "", fmt.Errorf("cgroup: systemd scope %q in slice %q: wrong unit types", scope, slice)
	}
	conn, err := sddbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return "", fmt.Errorf("cgroup: connect to systemd: %w", err)
	}
	defer conn.Close()
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, scope, "fail", scopeProperties(slice, pid), done); err != nil {
		var de godbus.Error
		if !errors.As(err, &de) || de.Name != "org.freedesktop.systemd1.UnitExists" {
			return "", fmt.Errorf("cgroup: start transient scope %s in %s: %w", scope, slice, err)
		}
	} else {
		select {
		case res := <-done:
			if res != "done" {
				return "", fmt.Errorf("cgroup: start transient scope %s: job %s", scope, res)
			}
		case <-time.After(30 * time.Second):
			return "", fmt.Errorf("cgroup: start transient scope %s: no answer from systemd in 30 s", scope)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return slicePath(slice) + "/" + scope, nil
}

// slicePath expands a slice name to its cgroup path: "a-b.slice" lives at
// "a.slice/a-b.slice" (systemd.slice(5)).
func slicePath(slice string) string {
	name := strings.TrimSuffix(slice, ".slice")
	if name == "" || name == "-" {
		return ""
	}
	parts := strings.Split(name, "-")
	var out []string
	for i := range parts {
		out = append(out, strings.Join(parts[:i+1], "-")+".slice")
	}
	return strings.Join(out, "/")
}
