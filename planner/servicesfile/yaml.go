package servicesfile

import (
	"fmt"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// secondDocument is the line of a "---" that starts a second YAML document
// (one after content), or 0.
// yaml11True maps the plain words YAML 1.1 reads as bools, besides true
// and false themselves, to the bool it reads.
var yaml11True = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range []string{"y", "yes", "on"} {
		m[w], m[strings.ToUpper(w[:1])+w[1:]], m[strings.ToUpper(w)] = true, true, true
	}
	for _, w := range []string{"n", "no", "off"} {
		m[w], m[strings.ToUpper(w[:1])+w[1:]], m[strings.ToUpper(w)] = false, false, false
	}
	return m
}()

// boolKey finds the first map key written as a plain (unquoted) word that
// YAML 1.1 reads as a bool: services files are read as YAML 1.1, where a
// service named y or no becomes "true" or "false", silently. It returns
// the key's path (services.y), the key and its line; "" when there is none
// or the file is not YAML (the decoder says why).
func boolKey(data []byte) (path, key string, line int) {
	var doc yamlv3.Node
	if yamlv3.Unmarshal(data, &doc) != nil {
		return "", "", 0
	}
	var walk func(n *yamlv3.Node, at string) bool
	walk = func(n *yamlv3.Node, at string) bool {
		switch n.Kind {
		case yamlv3.DocumentNode:
			for _, c := range n.Content {
				if walk(c, at) {
					return true
				}
			}
		case yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				p := k.Value
				if at != "" {
					p = at + "." + k.Value
				}
				if _, ok := yaml11True[k.Value]; ok && k.Kind == yamlv3.ScalarNode && k.Style == 0 && k.Tag == "!!str" {
					path, key, line = p, k.Value, k.Line
					return true
				}
				if walk(n.Content[i+1], p) {
					return true
				}
			}
		case yamlv3.SequenceNode:
			for i, c := range n.Content {
				if walk(c, fmt.Sprintf("%s[%d]", at, i)) {
					return true
				}
			}
		}
		return false
	}
	walk(&doc, "")
	return path, key, line
}

func secondDocument(data []byte) int {
	content := false
	for i, l := range strings.Split(string(data), "\n") {
		t := strings.TrimRight(l, " \t\r")
		switch {
		case t == "---" || strings.HasPrefix(t, "--- "):
			if content {
				return i + 1
			}
		case t != "" && !strings.HasPrefix(strings.TrimSpace(t), "#"):
			content = true
		}
	}
	return 0
}

// duplicateKey finds the first key given twice in one map (two services
// of one name: YAML would keep the last silently), as its map's path, the
// key and its line; "" when there is none or the file is not YAML. A key
// that overrides one a merge key (<<: *anchor) brought is no duplicate
// (the merged keys are not the map's own): that is what merging is for,
// and why the file is not read strictly.
func duplicateKey(data []byte) (path, key string, line int) {
	var doc yamlv3.Node
	if yamlv3.Unmarshal(data, &doc) != nil {
		return "", "", 0
	}
	var walk func(n *yamlv3.Node, at string) bool
	walk = func(n *yamlv3.Node, at string) bool {
		switch n.Kind {
		case yamlv3.DocumentNode, yamlv3.SequenceNode:
			for _, c := range n.Content {
				if walk(c, at) {
					return true
				}
			}
		case yamlv3.MappingNode:
			seen := map[string]bool{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if seen[k.Value] {
					path, key, line = at, k.Value, k.Line
					return true
				}
				seen[k.Value] = true
				p := k.Value
				if at != "" {
					p = at + "." + k.Value
				}
				if walk(n.Content[i+1], p) {
					return true
				}
			}
		}
		return false
	}
	walk(&doc, "")
	return path, key, line
}
