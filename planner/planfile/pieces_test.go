package planfile

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
)

// asMap is what encoding/json makes of the same object (the last of a
// duplicated key wins).
func asMap(p Pieces) map[string]int {
	m := map[string]int{}
	for _, e := range p {
		m[e.Key] = e.Value
	}
	return m
}

// TestPiecesDecode: the fast scanner reads what encoding/json reads, keeps
// duplicated keys for the host builder to refuse, and leaves anything
// unusual to encoding/json.
func TestPiecesDecode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		fast     bool   // the scanner takes it
		pairs    int    // entries kept
		err      string // "" = decodes
	}{
		{"plain", `{"0": 100, "1": 30}`, true, 2, ""},
		{"no spaces", `{"0":100,"12":-5}`, true, 2, ""},
		{"newlines and tabs", "{\n\t\"0\" :\r\n 7 \n}", true, 1, ""},
		{"empty", `{ }`, true, 0, ""},
		{"duplicate key kept twice", `{"3": 1, "3": 2}`, true, 2, ""},
		{"escaped key", `{"\u0030": 100}`, false, 1, ""},
		{"fraction", `{"0": 1.5}`, false, 0, "cannot unmarshal number 1.5"},
		{"exponent", `{"0": 1e2}`, false, 0, "cannot unmarshal number 1e2"},
		{"string value", `{"0": "100"}`, false, 0, "cannot unmarshal string"},
		{"array", `[1, 2]`, false, 0, "cannot unmarshal array"},
		{"trailing comma", `{"0": 1,}`, false, 0, "invalid character"},
		{"overflow", `{"0": 99999999999999999999}`, false, 0, "cannot unmarshal number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, fast := scanPieces([]byte(tc.in))
			if fast != tc.fast {
				t.Errorf("fast path %v, want %v", fast, tc.fast)
			}
			var p Pieces
			err := json.Unmarshal([]byte(tc.in), &p)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want map[string]int
			if err := json.Unmarshal([]byte(tc.in), &want); err != nil {
				t.Fatal(err)
			}
			if len(p) != tc.pairs || !maps.Equal(asMap(p), want) {
				t.Errorf("decoded %v, want %d pairs equal to encoding/json's %v", p, tc.pairs, want)
			}
		})
	}
}

// FuzzPieces: whatever the scanner accepts, encoding/json reads the same.
func FuzzPieces(f *testing.F) {
	f.Add(`{"0": 100, "1": 30}`)
	f.Add(`{"0":1,"0":2}`)
	f.Add(`{"a": -0}`)
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := scanPieces([]byte(s))
		if !ok {
			return
		}
		var m map[string]int
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("scanner took %q, encoding/json refuses it: %v", s, err)
		}
		if !maps.Equal(asMap(p), m) {
			t.Fatalf("%q: scanner %v, encoding/json %v", s, p, m)
		}
	})
}
