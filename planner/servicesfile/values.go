package servicesfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// flexString is a value written as a number or a string (cpu: 1.5 or
// cpu: "1.5"; memory: 1GiB or memory: 1073741824).
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = flexString(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return typeError(b, f)
	}
	*f = flexString(n.String())
	return nil
}

// typeError is a custom decoder's refusal of the JSON value b for *into:
// encoding/json adds the field, and fieldError says what is wanted
// (customWant).
func typeError(b []byte, into any) error {
	kind := "number"
	if t := bytes.TrimSpace(b); len(t) > 0 {
		switch t[0] {
		case 't', 'f':
			kind = "bool"
		case '[':
			kind = "array"
		case '{':
			kind = "object"
		case '"':
			kind = "string"
		case 'n':
			kind = "null"
		}
	}
	return &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeOf(into).Elem()}
}

// customWant is what each custom decoder takes, for fieldError.
var customWant = map[reflect.Type]string{
	reflect.TypeFor[flexString]():  "a number or a string",
	reflect.TypeFor[commandList](): "a list of words or a string",
	reflect.TypeFor[envList]():     "a list of K=V or a map of K: V",
}

// commandList is a command: a list of words, or one string split like a
// shell would (quotes, backslashes; no variables or globs).
type commandList []string

func (c *commandList) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*c = list
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return typeError(b, c)
	}
	words, err := splitWords(s)
	if err != nil {
		return err
	}
	*c = words
	return nil
}

// envList is an environment: a list of K=V, or a map of K: V.
type envList []string

func (e *envList) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*e = list
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return typeError(b, e)
	}
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch v := m[k].(type) {
		case nil:
			out = append(out, k+"=")
		case string:
			out = append(out, k+"="+v)
		case float64, bool:
			out = append(out, k+"="+fmt.Sprint(v))
		default:
			return fmt.Errorf("%s: want a string, number or boolean", k)
		}
	}
	*e = out
	return nil
}

// splitWords splits s into words like a POSIX shell: blanks separate,
// single quotes keep everything, double quotes and backslashes escape.
func splitWords(s string) ([]string, error) {
	var (
		words      []string
		cur        strings.Builder
		in         bool // inside a word
		quote      rune
		escapeNext bool
	)
	for _, r := range s {
		switch {
		case escapeNext:
			cur.WriteRune(r)
			escapeNext = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch r {
			case '"':
				quote = 0
			case '\\':
				escapeNext = true
			default:
				cur.WriteRune(r)
			}
		case r == '\\':
			escapeNext, in = true, true
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 || escapeNext {
		return nil, fmt.Errorf("%q: an unclosed quote or a trailing backslash", s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
