package servicesfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/planner/model"
)

// model.Scheduling's fields reach both file kinds and the diff through
// their json tags alone: a pinfold services file has the key itself
// (max_per_host, embedded in fileService), a compose file the extension
// key x-pinfold-max-per-host (compose's own x- convention), and the diff
// compares every field. A new scheduling option needs no code here.

// schedulingFields are model.Scheduling's fields with their keys.
func schedulingFields() (keys []string, fields []reflect.StructField) {
	for _, f := range reflect.VisibleFields(reflect.TypeFor[model.Scheduling]()) {
		if key, ok := jsonKey(f); ok {
			keys, fields = append(keys, key), append(fields, f)
		}
	}
	return keys, fields
}

// composeKey is a scheduling key's compose extension key.
func composeKey(key string) string { return "x-pinfold-" + strings.ReplaceAll(key, "_", "-") }

// decodeComposeScheduling reads a compose service's x-pinfold-KEY keys
// (of keys, the service's map) into s, and checks s as a pinfold file's
// would be checked; named gets each key's path for the planner's refusals.
// An x-pinfold- key that is no scheduling key is an error naming those
// there are; other x- keys are compose's extensions, not pinfold's.
func decodeComposeScheduling(path string, keys map[string]json.RawMessage, s *model.Scheduling, named map[string]string) error {
	names, fields := schedulingFields()
	known := map[string]int{}
	for i, k := range names {
		known[composeKey(k)] = i
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		i, ok := known[k]
		if !ok {
			if strings.HasPrefix(k, "x-pinfold-") {
				return fmt.Errorf("%s: unknown key %q (pinfold's compose keys: %s)", path, k, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
			}
			continue
		}
		named[names[i]] = path + "." + k
		v := reflect.ValueOf(s).Elem().FieldByIndex(fields[i].Index)
		dec := json.NewDecoder(bytes.NewReader(keys[k]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v.Addr().Interface()); err != nil {
			if e, ok := keyError(func(string) string { return path + "." + k }, err); ok { // the type's own reader said why
				return e
			}
			return fmt.Errorf("%s.%s: %s where %s is wanted", path, k, cutText(string(keys[k]), 80), goTypeWord(fields[i].Type.Kind().String()))
		}
	}
	if err := s.Validate(); err != nil {
		return pathError(func(field string) string { return path + "." + composeKey(field) }, path, err)
	}
	return nil
}

// schedulingChanges are the scheduling fields of cur and want that
// differ, as "key from → to" (a zero value by its zero tag: auto, no cap).
func schedulingChanges(cur, want model.Scheduling) []string {
	var out []string
	names, fields := schedulingFields()
	for i, f := range fields {
		a := reflect.ValueOf(cur).FieldByIndex(f.Index)
		b := reflect.ValueOf(want).FieldByIndex(f.Index)
		if reflect.DeepEqual(a.Interface(), b.Interface()) {
			continue
		}
		show := func(v reflect.Value) string {
			if z := f.Tag.Get("zero"); v.IsZero() && z != "" {
				return z
			}
			return fmt.Sprint(v.Interface())
		}
		if sa, sb := show(a), show(b); sa != sb {
			out = append(out, fmt.Sprintf("%s %s → %s", names[i], sa, sb))
		}
	}
	return out
}
