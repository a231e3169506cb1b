package servicesfile

import (
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// projectKey is the top-level key of a pinfold services file naming its
// project; a compose file names it with name (compose's own key).
const projectKey = "project"

// Project is the project data names: a services file's top-level project
// key, a compose file's name; "" when it names none (the caller then uses
// the file's directory's name, as docker compose does). apply records
// it as each service's source, and --prune removes only the services of
// that project. A name that is not a valid source is an error naming the
// key. compose reports whether data is a compose file. data is a file
// Decode accepts.
func Project(data []byte) (name string, compose bool, err error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return "", false, fmt.Errorf("not YAML or JSON: %v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return "", false, fmt.Errorf("want a map with a services key at the top")
	}
	var services map[string]json.RawMessage
	_ = json.Unmarshal(top["services"], &services)
	key, compose := projectKey, isCompose(top, services)
	if compose {
		key = "name"
	}
	raw, ok := top[key]
	if !ok {
		return "", compose, nil
	}
	if err := json.Unmarshal(raw, &name); err != nil || string(raw) == "null" {
		return "", compose, fmt.Errorf("%s: %s: want a project name (a string)", key, cutText(string(raw), 40))
	}
	if err := model.ValidateSource(name); err != nil {
		return "", compose, fmt.Errorf("%s: %q: %s", key, name, err.(*model.FieldError).Why)
	}
	if why := projectNameWhy(name); why != "" {
		return "", compose, fmt.Errorf("%s: %q: %s", key, name, why)
	}
	return name, compose, nil
}

// projectNameWhy says what is wrong with a project name a file gives,
// "" when nothing: compose's rule (lower-case letters, digits, - and _,
// starting with a letter or digit), stricter than a source's
// (model.ValidateSource, which the directory's name is also held to).
// An empty name is a mistake, not the default project: a file naming
// none leaves the key out.
func projectNameWhy(name string) string {
	const rule = "want lower-case letters, digits, '-' and '_', starting with a letter or digit (a compose project name)"
	if name == "" {
		return "an empty name: name the project, or leave the key out (the file's directory names it then)"
	}
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && (r == '-' || r == '_')) {
			return rule
		}
	}
	return ""
}

// Foreign refuses the services of want that the planner holds for another
// project than project (records: the planner's record of each service of
// want it has, as Compare takes them): compose's service names belong to
// their project, and apply would otherwise replace, resize or recreate
// another project's service and record it as this one's. A service
// deployed by hand (source "") is this project's to adopt. The refusal is
// of the whole file, before any change, naming every such service with
// its owner; nil when there is none.
func Foreign(want []Service, records map[string]*pinfoldv1.ServiceRecord, project string) error {
	var errs []error
	for _, w := range want {
		rec := records[w.Deploy.Service]
		if src := rec.GetSource(); src != "" && src != project {
			key := w.Key("")
			if w.File != "" {
				key = w.File + ": " + key
			}
			errs = append(errs, fmt.Errorf("%s: of project %s, not %s: apply leaves another project's services (rename it in this file, or remove it first)", key, src, project))
		}
	}
	return errors.Join(errs...)
}
