package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Kind is a property value's type.
type Kind int

const (
	String Kind = iota
	Bool
	Int
)

// Value is a typed host property (seed 000: string, boolean or signed
// integer).
type Value struct {
	Kind Kind
	S    string
	B    bool
	I    int64
}

// Str, BoolVal and IntVal build values.
func Str(s string) Value   { return Value{Kind: String, S: s} }
func BoolVal(b bool) Value { return Value{Kind: Bool, B: b} }
func IntVal(i int64) Value { return Value{Kind: Int, I: i} }
func (v Value) String() string {
	switch v.Kind {
	case Bool:
		return strconv.FormatBool(v.B)
	case Int:
		return strconv.FormatInt(v.I, 10)
	}
	return v.S
}

// ParseValue reads a property value given as text (from a CLI flag): true
// and false are booleans, a signed integer is an integer, anything else a
// string.
func ParseValue(s string) Value {
	switch s {
	case "true":
		return BoolVal(true)
	case "false":
		return BoolVal(false)
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return IntVal(i)
	}
	return Str(s)
}

// SyntaxError is a constraint that does not parse; Column is 1-based.
type SyntaxError struct {
	Expr   string
	Column int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("constraint %q: column %d: %s", e.Expr, e.Column, e.Msg)
}

// Expr is a parsed placement constraint.
type Expr struct {
	src   string
	root  node
	props []string // every property the expression reads, sorted, unique
}

// String returns the source text.
func (e *Expr) String() string { return e.src }

// Properties lists the properties the expression reads.
func (e *Expr) Properties() []string { return e.props }

// Match evaluates the constraint against a host's properties. A host that
// lacks any property the expression reads does not match (seed 000).
func (e *Expr) Match(props map[string]Value) bool {
	if e == nil || e.root == nil {
		return true
	}
	for _, p := range e.props {
		if _, ok := props[p]; !ok {
			return false
		}
	}
	return e.root.eval(props)
}

type node interface{ eval(map[string]Value) bool }

type andNode struct{ l, r node }
type orNode struct{ l, r node }
type notNode struct{ x node }
type cmpNode struct {
	prop string
	op   string // == != > >= < <=
	lit  literal
}
type inNode struct {
	prop string
	lits []literal
}

// literal is a right-hand side: its text and whether it was quoted (a
// quoted literal is always a string).
type literal struct {
	text   string
	quoted bool
}

func (n andNode) eval(p map[string]Value) bool { return n.l.eval(p) && n.r.eval(p) }
func (n orNode) eval(p map[string]Value) bool  { return n.l.eval(p) || n.r.eval(p) }
func (n notNode) eval(p map[string]Value) bool { return !n.x.eval(p) }
func (n inNode) eval(p map[string]Value) bool {
	for _, l := range n.lits {
		if compare(p[n.prop], "==", l) {
			return true
		}
	}
	return false
}
func (n cmpNode) eval(p map[string]Value) bool { return compare(p[n.prop], n.op, n.lit) }

// compare compares a property with a literal: integers numerically when the
// literal is an integer, booleans when it is true or false (only == and
// !=), everything else as strings.
func compare(v Value, op string, l literal) bool {
	c, ok := 0, true
	switch {
	case v.Kind == Int && !l.quoted:
		i, err := strconv.ParseInt(l.text, 10, 64)
		if err != nil {
			return op == "!="
		}
		c = cmp.Compare(v.I, i)
	case v.Kind == Bool && !l.quoted && (l.text == "true" || l.text == "false"):
		if op != "==" && op != "!=" {
			return false
		}
		c, ok = 1, v.B == (l.text == "true")
		if ok {
			c = 0
		}
	default:
		c = strings.Compare(v.String(), l.text)
	}
	switch op {
	case "==":
		return c == 0
	case "!=":
		return c != 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	}
	return false
}

// MaxExprLen bounds a constraint's length (and so its nesting).
const MaxExprLen = 4096

// Parse parses a constraint:
//
//	expr   = or
//	or     = and { "||" and }
//	and    = unary { "&&" unary }
//	unary  = "!" unary | "(" expr ")" | cmp
//	cmp    = NAME op literal | NAME "in" ( "(" list ")" | "[" list "]" )
//	op     = "==" | "!=" | ">" | ">=" | "<" | "<="
//	list   = literal { [","] literal }
//
// A literal is a word (green, 5, true, node-2.acme) or a quoted string.
// The empty constraint matches every host.
func Parse(src string) (*Expr, error) {
	if len(src) > MaxExprLen {
		// The limit is in bytes; the column counts characters, as every
		// other column does (multi-byte text reaches it sooner).
		col := utf8.RuneCountInString(src[:MaxExprLen]) + 1
		return nil, &SyntaxError{Expr: src[:32] + "…", Column: col, Msg: fmt.Sprintf("longer than %d bytes", MaxExprLen)}
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{src: src, toks: toks, seen: map[string]bool{}}
	e := &Expr{src: src}
	if len(toks) == 1 { // only EOF
		return e, nil
	}
	root, err := p.or()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, p.errAt(t, "unexpected %s after a complete expression", t)
	}
	e.root = root
	for name := range p.seen {
		e.props = append(e.props, name)
	}
	slices.Sort(e.props)
	return e, nil
}

type tkind int

const (
	tEOF tkind = iota
	tWord
	tQuoted
	tOp     // == != > >= < <=
	tAnd    // &&
	tOr     // ||
	tNot    // !
	tLParen // (
	tRParen // )
	tLBrack // [
	tRBrack // ]
	tComma
)

type token struct {
	kind tkind
	text string
	col  int // 1-based
}

func (t token) String() string {
	if t.kind == tEOF {
		return "end of input"
	}
	return fmt.Sprintf("%q", t.text)
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("_-.:/+@", r)
}

// twoRuneTokens and oneRuneTokens are the punctuation tokens (tEOF, the
// zero kind, stands for "not one").
var (
	twoRuneTokens = map[string]tkind{"==": tOp, "!=": tOp, ">=": tOp, "<=": tOp, "&&": tAnd, "||": tOr}
	oneRuneTokens = map[rune]tkind{'>': tOp, '<': tOp, '!': tNot, '(': tLParen, ')': tRParen, '[': tLBrack, ']': tRBrack, ',': tComma}
)

func lex(src string) ([]token, error) {
	var out []token
	rs := []rune(src)
	for i := 0; i < len(rs); {
		r, col := rs[i], i+1
		two := ""
		if i+1 < len(rs) {
			two = string(rs[i : i+2])
		}
		switch {
		case unicode.IsSpace(r):
			i++
		case twoRuneTokens[two] != 0:
			out = append(out, token{twoRuneTokens[two], two, col})
			i += 2
		case oneRuneTokens[r] != 0:
			out = append(out, token{oneRuneTokens[r], string(r), col})
			i++
		case r == '"' || r == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != r {
				j++
			}
			if j == len(rs) {
				return nil, &SyntaxError{Expr: src, Column: col, Msg: "unterminated string"}
			}
			out = append(out, token{tQuoted, string(rs[i+1 : j]), col})
			i = j + 1
		case r == '=' || r == '&' || r == '|':
			return nil, &SyntaxError{Expr: src, Column: col, Msg: fmt.Sprintf("%q: did you mean %q?", string(r), string(r)+string(r))}
		case isWordRune(r):
			j := i
			for j < len(rs) && isWordRune(rs[j]) {
				j++
			}
			out = append(out, token{tWord, string(rs[i:j]), col})
			i = j
		default:
			return nil, &SyntaxError{Expr: src, Column: col, Msg: fmt.Sprintf("unexpected character %q", r)}
		}
	}
	return append(out, token{kind: tEOF, col: len(rs) + 1}), nil
}

type parser struct {
	src   string
	toks  []token
	pos   int
	depth int
	seen  map[string]bool
}

func (p *parser) peek() token { return p.toks[p.pos] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tEOF {
		p.pos++
	}
	return t
}

func (p *parser) errAt(t token, format string, args ...any) error {
	return &SyntaxError{Expr: p.src, Column: t.col, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) or() (node, error) {
	return p.chain(tOr, p.and, func(l, r node) node { return orNode{l, r} })
}

func (p *parser) and() (node, error) {
	return p.chain(tAnd, p.unary, func(l, r node) node { return andNode{l, r} })
}

// chain parses operand { op operand }, left-associative.
func (p *parser) chain(op tkind, operand func() (node, error), join func(l, r node) node) (node, error) {
	l, err := operand()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == op {
		p.next()
		r, err := operand()
		if err != nil {
			return nil, err
		}
		l = join(l, r)
	}
	return l, nil
}

const maxDepth = 100

func (p *parser) unary() (node, error) {
	t := p.peek()
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, p.errAt(t, "nested more than %d deep", maxDepth)
	}
	switch t.kind {
	case tNot:
		p.next()
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return notNode{x}, nil
	case tLParen:
		p.next()
		x, err := p.or()
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tRParen {
			return nil, p.errAt(c, "want \")\" to close the \"(\" at column %d, got %s", t.col, c)
		}
		return x, nil
	case tWord:
		return p.comparison()
	}
	return nil, p.errAt(t, "want a property name, \"!\" or \"(\", got %s", t)
}

func (p *parser) comparison() (node, error) {
	name := p.next()
	p.seen[canonical(name.text)] = true
	prop := canonical(name.text)
	op := p.next()
	switch {
	case op.kind == tOp:
		l, err := p.literal()
		if err != nil {
			return nil, err
		}
		return cmpNode{prop: prop, op: op.text, lit: l}, nil
	case op.kind == tWord && op.text == "in":
		open := p.next()
		closeKind := tRParen
		switch open.kind {
		case tLParen:
		case tLBrack:
			closeKind = tRBrack
		default:
			return nil, p.errAt(open, "want \"(\" or \"[\" after in, got %s", open)
		}
		var lits []literal
		for {
			if t := p.peek(); t.kind == closeKind {
				p.next()
				break
			}
			if t := p.peek(); t.kind == tComma && len(lits) > 0 {
				p.next()
				continue
			}
			l, err := p.literal()
			if err != nil {
				return nil, err
			}
			lits = append(lits, l)
		}
		if len(lits) == 0 {
			return nil, p.errAt(open, "empty list after in")
		}
		return inNode{prop: prop, lits: lits}, nil
	}
	return nil, p.errAt(op, "want a comparison (== != > >= < <=) or in after %q, got %s", name.text, op)
}

func (p *parser) literal() (literal, error) {
	t := p.next()
	switch t.kind {
	case tWord:
		return literal{text: t.text}, nil
	case tQuoted:
		return literal{text: t.text, quoted: true}, nil
	}
	return literal{}, p.errAt(t, "want a value (a word, a number, true/false or a quoted string), got %s", t)
}

// canonical maps Service Fabric's built-in names to pinfold's.
func canonical(name string) string {
	switch name {
	case "NodeName":
		return "HostName"
	case "NodeType":
		return "HostType"
	}
	return name
}

// MarshalJSON writes the value as a JSON string, boolean or number.
func (v Value) MarshalJSON() ([]byte, error) {
	switch v.Kind {
	case Bool:
		return []byte(strconv.FormatBool(v.B)), nil
	case Int:
		return []byte(strconv.FormatInt(v.I, 10)), nil
	}
	return []byte(strconv.Quote(v.S)), nil
}

// UnmarshalJSON reads a JSON string, boolean or integer.
func (v *Value) UnmarshalJSON(b []byte) error {
	s := string(b)
	switch {
	case s == "true" || s == "false":
		*v = BoolVal(s == "true")
	case strings.HasPrefix(s, `"`):
		u, err := strconv.Unquote(s)
		if err != nil {
			return err
		}
		*v = Str(u)
	default:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("property value %s: want a string, a boolean or a signed integer", s)
		}
		*v = IntVal(i)
	}
	return nil
}
