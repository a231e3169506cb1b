package placement

import (
	"errors"
	"strings"
	"testing"
)

// The seed 000 node type: HasSSD true, NodeColor green, SomeProperty 5.
var nodeType01 = map[string]Value{"HasSSD": BoolVal(true), "NodeColor": Str("green"), "SomeProperty": IntVal(5),
	"HostName": Str("n1"), "HostType": Str("NodeType01")}

func TestParseAndMatch(t *testing.T) {
	t.Parallel()
	other := map[string]Value{"HasSSD": BoolVal(false), "NodeColor": Str("blue"), "SomeProperty": IntVal(3),
		"OneProperty": IntVal(150), "AnotherProperty": BoolVal(false), "Value": IntVal(7), "HostName": Str("node2.acme.com"),
		"HostType": Str("NodeType02"), "env": Str("TST")}
	tests := []struct {
		expr          string
		want01, other bool
	}{
		// Seed 000 examples.
		{"HasSSD == true && SomeProperty >= 4", true, false},
		{"(HasSSD == true && SomeProperty >= 4)", true, false},
		{"NodeColor != green", false, true},
		{"Value >= 5", false, true}, // nodeType01 lacks Value: no match
		{"((OneProperty < 100) || ((AnotherProperty == false) && (OneProperty >= 100)))", false, true},
		{"NodeType == NodeType01", true, false},
		{"(NodeType == NodeType01)", true, false},
		{"HostType == NodeType01", true, false},
		// Negation, precedence, missing properties.
		{"!(HasSSD == true)", false, true},
		{"!(Missing == 1)", false, false}, // a host lacking Missing never matches
		{"HasSSD == true || SomeProperty < 4 && NodeColor == blue", true, true},
		{"(HasSSD == true || SomeProperty < 4) && NodeColor == blue", false, true},
		// OpenSVC (seed 003): in with parentheses or brackets, commas optional.
		{`HostName == "node2.acme.com"`, false, true},
		{"HostName == n1 || env in (DEV, TST)", false, true}, // n1 lacks env: no match, even under ||
		{"NodeColor in (red green)", true, false},
		{"NodeColor in [blue]", false, true},
		{"SomeProperty in (3 4)", false, true},
		// Typed comparisons.
		{"SomeProperty > 4", true, false},
		{"SomeProperty <= 3", false, true},
		{`SomeProperty == "5"`, true, false}, // quoted: compared as a string
		{"HasSSD > true", false, false},      // booleans have no order
		{"NodeColor < h", true, true},        // strings compare lexically
		{"", true, true},
	}
	for _, tt := range tests {
		e, err := Parse(tt.expr)
		if err != nil {
			t.Errorf("Parse(%q) = %v", tt.expr, err)
			continue
		}
		if got := e.Match(nodeType01); got != tt.want01 {
			t.Errorf("%q on NodeType01 = %v, want %v", tt.expr, got, tt.want01)
		}
		if got := e.Match(other); got != tt.other {
			t.Errorf("%q on the other host = %v, want %v", tt.expr, got, tt.other)
		}
	}
}

func TestParseErrorsPointAtTheColumn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		col  int
		msg  string
	}{
		{"HasSSD = true", 8, `did you mean "=="`},
		{"HasSSD == true &&", 18, "end of input"},
		{"(HasSSD == true", 16, `close the "(" at column 1`},
		{"HasSSD == true)", 15, "after a complete expression"},
		{"HasSSD true", 8, "want a comparison"},
		{"== true", 1, "want a property name"},
		{"Color in red", 10, `want "(" or "["`},
		{"Color in ()", 10, "empty list"},
		{`Color == "green`, 10, "unterminated string"},
		{"Color == green $", 16, "unexpected character"},
		{"a == 1 & b == 2", 8, `did you mean "&&"`},
		{strings.Repeat("(", 200) + "a == 1" + strings.Repeat(")", 200), 101, "nested more than 100"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.expr)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q) = %v, want a *SyntaxError", tt.expr, err)
			continue
		}
		if se.Column != tt.col || !strings.Contains(se.Msg, tt.msg) {
			t.Errorf("Parse(%q) = column %d %q, want column %d containing %q", tt.expr, se.Column, se.Msg, tt.col, tt.msg)
		}
	}
}

func TestParseValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Value{"true": BoolVal(true), "false": BoolVal(false), "5": IntVal(5), "-3": IntVal(-3), "green": Str("green"), "5x": Str("5x")} {
		if got := ParseValue(in); got != want {
			t.Errorf("ParseValue(%q) = %+v, want %+v", in, got, want)
		}
	}
}

// FuzzParse: the parser never panics; every error carries a column within
// the input (+1 for the end), and what parses evaluates without panicking.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"HasSSD == true && SomeProperty >= 4", "((OneProperty < 100) || ((AnotherProperty == false) && (OneProperty >= 100)))",
		"env in (DEV, TST)", `HostName == "node2.acme.com"`, "!(a != b)", "a in [x y z]", "(((", "a ==", "\"", "a == 'b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q) = %v: not a *SyntaxError", s, err)
			}
			if se.Column < 1 || se.Column > len([]rune(s))+1 {
				t.Fatalf("Parse(%q): column %d outside 1..%d", s, se.Column, len([]rune(s))+1)
			}
			return
		}
		props := map[string]Value{}
		for i, p := range e.Properties() {
			props[p] = []Value{Str("x"), IntVal(int64(i)), BoolVal(true)}[i%3]
		}
		e.Match(props)
		e.Match(nil)
	})
}
