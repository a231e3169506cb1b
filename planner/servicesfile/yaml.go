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
	var at keyPath
	var walk func(n *yamlv3.Node) bool
	walk = func(n *yamlv3.Node) bool {
		switch n.Kind {
		case yamlv3.DocumentNode:
			for _, c := range n.Content {
				if walk(c) {
					return true
				}
			}
		case yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if _, ok := yaml11True[k.Value]; ok && k.Kind == yamlv3.ScalarNode && k.Style == 0 && k.Tag == "!!str" {
					path, key, line = at.with(k.Value), k.Value, k.Line
					return true
				}
				at = append(at, k.Value)
				found := walk(n.Content[i+1])
				at = at[:len(at)-1]
				if found {
					return true
				}
			}
		case yamlv3.SequenceNode:
			for i, c := range n.Content {
				at = append(at, fmt.Sprintf("[%d]", i))
				found := walk(c)
				at = at[:len(at)-1]
				if found {
					return true
				}
			}
		}
		return false
	}
	walk(&doc)
	return path, key, line
}

// keyPath is the keys down to a node, a sequence's index as "[i]": the
// walks keep it as a stack and spell it only when they report (a path
// built at every level costs the depth times the keys' length at each:
// a crafted 9 MB file of nested long keys took 21.6 GB in the attack
// review of issue 38).
type keyPath []string

// String is the path as the errors spell it: services.web.ports[0].
func (p keyPath) String() string {
	var b strings.Builder
	for i, k := range p {
		if i > 0 && !strings.HasPrefix(k, "[") {
			b.WriteByte('.')
		}
		b.WriteString(k)
	}
	return b.String()
}

// with is the path of key k under p.
func (p keyPath) with(k string) string {
	if len(p) == 0 {
		return k
	}
	return p.String() + "." + k
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
	var at keyPath
	var walk func(n *yamlv3.Node) bool
	walk = func(n *yamlv3.Node) bool {
		switch n.Kind {
		case yamlv3.DocumentNode, yamlv3.SequenceNode:
			for _, c := range n.Content {
				if walk(c) {
					return true
				}
			}
		case yamlv3.MappingNode:
			seen := map[string]bool{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if seen[k.Value] {
					path, key, line = at.String(), k.Value, k.Line
					return true
				}
				seen[k.Value] = true
				at = append(at, k.Value)
				found := walk(n.Content[i+1])
				at = at[:len(at)-1]
				if found {
					return true
				}
			}
		}
		return false
	}
	walk(&doc)
	return path, key, line
}
