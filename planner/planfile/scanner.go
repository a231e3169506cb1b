package planfile

import (
	"bytes"
	"strconv"
)

// scanner reads JSON from b at i: only what encoding/json reads the same
// way; anything else is reported as not ok.
type scanner struct {
	b    []byte
	i    int
	keys *keyCache
}

func (s *scanner) skipWS() int {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\n' || s.b[s.i] == '\t' || s.b[s.i] == '\r') {
		s.i++
	}
	return s.i
}

// byte consumes c after white space.
func (s *scanner) byte(c byte) bool {
	s.skipWS()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// key reads `"key" :`: a key of printable ASCII without escapes.
func (s *scanner) key() ([]byte, bool) {
	str, ok := s.plainString()
	if !ok || !s.byte(':') {
		return nil, false
	}
	return str, true
}

// plainString reads a string of printable ASCII without escapes, which
// encoding/json reads as its bytes.
func (s *scanner) plainString() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// int reads an integer: -?(0|[1-9][0-9]*) that fits an int64 and is not
// followed by a fraction or an exponent (encoding/json refuses those for
// an integer field, and the whole decode names the field).
func (s *scanner) int() (int64, bool) {
	s.skipWS()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == digits || (s.i-digits > 1 && s.b[digits] == '0') {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return v, err == nil
}

// bool reads true or false.
func (s *scanner) bool() (bool, bool) {
	s.skipWS()
	switch {
	case bytes.HasPrefix(s.b[s.i:], []byte("true")):
		s.i += 4
		return true, s.delimited()
	case bytes.HasPrefix(s.b[s.i:], []byte("false")):
		s.i += 5
		return false, s.delimited()
	}
	return false, false
}

// delimited: a literal ends here (truex is not true).
func (s *scanner) delimited() bool {
	if s.i == len(s.b) {
		return true
	}
	switch s.b[s.i] {
	case ' ', '\n', '\t', '\r', ',', '}', ']':
		return true
	}
	return false
}

// object reads `{ "key": value, ... }`, calling field for each key with
// the scanner at its value; field reads the value and says whether it took
// it.
func (s *scanner) object(field func(key []byte) bool) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	for {
		key, ok := s.key()
		if !ok || !field(key) {
			return false
		}
		if s.byte(',') {
			continue
		}
		return s.byte('}')
	}
}

// null consumes a null.
func (s *scanner) null() bool {
	s.skipWS()
	if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		if s.delimited() {
			return true
		}
		s.i -= 4
	}
	return false
}

// strict decodes the value at s.i into v with encoding/json.
func (s *scanner) strict(v any) bool {
	start := s.skipWS()
	end, ok := skipValue(s.b, start)
	if !ok || decodeStrict(s.b[start:end], v) != nil {
		return false
	}
	s.i = end
	return true
}

// keyCache shares the strings of CPU ids: a 10,000-host file names CPU 0
// to 127 ten thousand times.
type keyCache struct{ ids []string }

// key is the string of a CPU id key: shared when it is a plain decimal.
func (c *keyCache) key(b []byte) string {
	if c == nil || len(b) == 0 || len(b) > 4 || (len(b) > 1 && b[0] == '0') {
		return string(b)
	}
	n := 0
	for _, d := range b {
		if d < '0' || d > '9' {
			return string(b)
		}
		n = n*10 + int(d-'0')
	}
	if n >= len(c.ids) {
		c.ids = append(c.ids, make([]string, n+1-len(c.ids))...)
	}
	if c.ids[n] == "" {
		c.ids[n] = string(b)
	}
	return c.ids[n]
}

// skipValue is the end of the JSON value starting at b[i]: a string, an
// object or an array (brackets matched outside strings), or a literal (up
// to a delimiter). It checks no more than it needs to find the end: the
// value is decoded after.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return i, false
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return i, false
			}
		case ',', ' ', '\n', '\t', '\r':
			if depth == 0 {
				return i, true
			}
		}
		if depth == 0 && (b[i] == '"' || b[i] == '}' || b[i] == ']') {
			return i + 1, true
		}
		if depth == 0 && i+1 < len(b) && (b[i+1] == '}' || b[i+1] == ']') {
			return i + 1, true // a literal ends at its container's end
		}
	}
	return i, depth == 0
}
