package servicesfile

import (
	"strings"
	"testing"
)

// TestProject: a file's project name is held to compose's rule
// (lower-case letters, digits, - and _, starting with a letter or digit):
// "...", "-x" and "a.b" were taken as projects, and an explicit empty
// name (or null) fell back to the default project without a word. Each
// is refused naming the key; a file naming none is "" (the directory's
// name, the caller's).
func TestProject(t *testing.T) {
	const svc = "services:\n  web: {image: a, mem_limit: 64m}\n"
	const pinfold = "services:\n  web: {image: a, memory: 64MiB}\n"
	tests := []struct {
		name, file string
		want       string // the project
		wantErr    string // "": none
	}{
		{"compose name", "name: shop-2_b\n" + svc, "shop-2_b", ""},
		{"pinfold project", "project: shop\n" + pinfold, "shop", ""},
		{"none", svc, "", ""},
		{"dots", `name: "..."` + "\n" + svc, "", `name: "...": want lower-case letters, digits, '-' and '_', starting with a letter or digit`},
		{"a dash first", `name: "-x"` + "\n" + svc, "", `name: "-x": want lower-case letters, digits, '-' and '_', starting with a letter or digit`},
		{"an underscore first", `name: "_x"` + "\n" + svc, "", `name: "_x": want lower-case`},
		{"a dot inside", "project: a.b\n" + pinfold, "", `project: "a.b": want lower-case letters, digits, '-' and '_'`},
		{"upper case", "name: Shop\n" + svc, "", `name: "Shop": want lower-case`},
		{"empty", `name: ""` + "\n" + svc, "", `name: "": an empty name: name the project, or leave the key out`},
		{"null", "name:\n" + svc, "", `name: null: want a project name (a string)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := Project([]byte(tt.file))
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Errorf("Project(%q) = %q, %v; want %q", tt.file, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got != "" {
				t.Errorf("Project(%q) = %q, %v; want an error containing %q", tt.file, got, err, tt.wantErr)
			}
		})
	}
}
