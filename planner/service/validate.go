package service

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/planner/model"
)

// ValidateNetwork checks a Docker network mode (model.ValidateNetwork):
// "" (the engine's default), host, none, bridge or a network's name.
func ValidateNetwork(n string) error {
	if err := model.ValidateNetwork(n); err != nil {
		return &Error{Code: Invalid, Message: err.Error()}
	}
	return nil
}

// ValidateHealth checks a health check's fields.
func ValidateHealth(h *model.HealthCheck) error {
	if h == nil {
		return nil
	}
	n := 0
	if h.Port != "" && len(h.Exec) == 0 && h.TCP == 0 && h.HTTP == "" {
		n++ // a TCP check on the named port
	}
	if len(h.Exec) > 0 {
		n++
	}
	if h.TCP != 0 {
		n++
		if h.TCP < 1 || h.TCP > 65535 {
			return errf(Invalid, "health tcp = %d: want a port 1..65535", h.TCP)
		}
	}
	if h.HTTP != "" {
		n++
		port, _, _ := strings.Cut(h.HTTP, "/")
		if h.Port != "" {
			if port != "" {
				return errf(Invalid, "health http = %q: with health port %q want a bare /PATH, e.g. /healthz", h.HTTP, h.Port)
			}
		} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return errf(Invalid, "health http = %q: want PORT[/PATH], e.g. 8080/healthz", h.HTTP)
		}
	}
	if n != 1 {
		return errf(Invalid, "health check: want exactly one of exec, tcp, http, or a port alone (got %d)", n)
	}
	if h.Port != "" && (len(h.Exec) > 0 || h.TCP != 0) {
		return errf(Invalid, "health port = %q: only with an http /PATH check, or alone (a tcp check on that port)", h.Port)
	}
	if h.Timeout != "" {
		if d, err := time.ParseDuration(h.Timeout); err != nil || d <= 0 || d > time.Hour {
			return errf(Invalid, "health timeout = %q: want a duration in (0, 1h], e.g. 30s", h.Timeout)
		}
	}
	return nil
}

// validateHealthPort checks that the port a health check names is one of
// ports.
func validateHealthPort(h *model.HealthCheck, ports []model.Port) error {
	if h == nil || h.Port == "" {
		return nil
	}
	if _, ok := model.PortOf(ports, h.Port); !ok {
		names := make([]string, len(ports))
		for i, p := range ports {
			names[i] = p.Name
		}
		return errf(Invalid, "health port = %q: not one of the instance's ports (%s)", h.Port, strings.Join(names, ", "))
	}
	return nil
}

func fmtBytes(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", b>>30)
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
	default:
		return fmt.Sprintf("%dB", b)
	}
}
