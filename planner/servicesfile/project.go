package servicesfile

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/pinfold/pinfold/planner/model"
)

// projectKey is the top-level key of a pinfold services file naming its
// project; a compose file names it with name (compose's own key).
const projectKey = "project"

// Project is the project data names: a services file's top-level project
// key, a compose file's name; "" when it names none (the caller then uses
// the file's name, as docker compose uses its directory's). apply records
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
	if err := json.Unmarshal(raw, &name); err != nil {
		return "", compose, fmt.Errorf("%s: %s: want a project name (a string)", key, cutText(string(raw), 40))
	}
	if err := model.ValidateSource(name); err != nil {
		return "", compose, fmt.Errorf("%s: %q: %s", key, name, err.(*model.FieldError).Why)
	}
	return name, compose, nil
}
