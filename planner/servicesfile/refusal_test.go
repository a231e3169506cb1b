package servicesfile

import (
	"testing"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// TestService_Refused: the planner's refusal of a service's deploy is
// named by the key the file gave the value, a compose file's own key
// included, after the file.
func TestService_Refused(t *testing.T) {
	web := Service{Deploy: &pinfoldv1.DeployRequest{Service: "web"}, File: "s.yaml"}
	compose := Service{Deploy: &pinfoldv1.DeployRequest{Service: "db"}, File: "-",
		Keys: map[string]string{"cpu": "services.db.deploy.resources.limits.cpus", "health": "services.db.healthcheck"}}
	tests := []struct {
		name string
		w    Service
		msg  string
		want string
	}{
		{"health http", web, `health http = "abc": want PORT[/PATH]`, `s.yaml: services.web.health.http: "abc": want PORT[/PATH]`},
		{"request field", web, `request.max_per_host = -1: want 0 or more`, `s.yaml: services.web.max_per_host: -1: want 0 or more`},
		{"service itself", web, `service name "x": bad`, `s.yaml: services.web: name "x": bad`},
		{"unknown field", web, `something odd`, `s.yaml: services.web: something odd`},
		// Their sum is bounded: the path names both (a new user's trial:
		// "services.big.command: 70008 bytes" for a 70 KB env value).
		{"command and env together", web, `command and env = 70008 bytes: want at most 65536`, `s.yaml: services.web.command and env: 70008 bytes: want at most 65536`},
		{"compose cpu", compose, `cpu = "0.505": not whole pieces`, `-: services.db.deploy.resources.limits.cpus: "0.505": not whole pieces`},
		{"compose health by its first key", compose, `health timeout = "x": bad`, `-: services.db.healthcheck: "x": bad`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.w.Refused(tt.msg).Error(); got != tt.want {
				t.Errorf("Refused(%q) = %q, want %q", tt.msg, got, tt.want)
			}
		})
	}
}
