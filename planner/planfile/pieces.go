package planfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// Pieces is a JSON object of CPU id → pieces ({"0": 100, "1": 30}), kept
// in file order. A 10,000-host file holds over a million of these pairs;
// decoding them into Go maps through reflection, then sorting string keys,
// was most of `pinfold plan`'s time, so they are scanned directly. Keys
// are checked (decimal CPU ids, no duplicates) where the host is built,
// which names the field.
type Pieces []Piece

// Piece is one pair of a Pieces object.
type Piece struct {
	Key   string
	Value int
}

// UnmarshalJSON scans a flat object of string keys and integer values; any
// other shape (escapes in keys, fractions, exponents) goes through
// encoding/json, whose errors name what is wrong.
func (p *Pieces) UnmarshalJSON(b []byte) error {
	if out, ok := scanPieces(b); ok {
		*p = out
		return nil
	}
	var m map[string]int
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	out := make(Pieces, 0, len(m))
	for k, v := range m {
		out = append(out, Piece{k, v})
	}
	slices.SortFunc(out, func(a, b Piece) int { return cmpKey(a.Key, b.Key) })
	*p = out
	return nil
}

// MarshalJSON writes the pairs as an object, in order.
func (p Pieces) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, e := range p {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, e.Key)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(e.Value), 10)
	}
	return append(b, '}'), nil
}

// cmpKey orders decimal keys numerically, others after them by bytes.
func cmpKey(a, b string) int {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return x - y
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return bytes.Compare([]byte(a), []byte(b))
}

// scanPieces is the fast path: `{` ws ( "key" ws `:` ws -?digits ws `,` )* `}`
// with printable ASCII keys without backslashes and integer values
// (no leading zeros) that fit an int.
func scanPieces(b []byte) (Pieces, bool) {
	return appendPieces(make(Pieces, 0, bytes.Count(b, []byte{':'})), b, nil)
}

// appendPieces is scanPieces appending to out, with keys shared through
// keys (nil: a string each).
func appendPieces(out Pieces, b []byte, keys *keyCache) (Pieces, bool) {
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
			i++
		}
	}
	ws()
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i++
	ws()
	if i < len(b) && b[i] == '}' {
		i++
		ws()
		return out, i == len(b)
	}
	for {
		ws()
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		j := bytes.IndexByte(b[i+1:], '"')
		if j < 0 {
			return nil, false
		}
		key := b[i+1 : i+1+j]
		for _, c := range key {
			if c < 0x20 || c > 0x7e || c == '\\' {
				return nil, false // escapes, control bytes, non-ASCII: encoding/json's rules
			}
		}
		i += j + 2
		ws()
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i++
		ws()
		start := i
		if i < len(b) && b[i] == '-' {
			i++
		}
		digits := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i-digits > 1 && b[digits] == '0' {
			return nil, false // JSON has no leading zeros
		}
		v, err := strconv.Atoi(string(b[start:i]))
		if err != nil {
			return nil, false
		}
		out = append(out, Piece{keys.key(key), v})
		ws()
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i++
			continue
		case '}':
			i++
			ws()
			return out, i == len(b)
		}
		return nil, false
	}
}

// String renders the pairs for error messages.
func (p Pieces) String() string {
	b, _ := p.MarshalJSON()
	return fmt.Sprint(string(b))
}
