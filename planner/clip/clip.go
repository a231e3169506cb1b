// Package clip cuts text that an error message or a record repeats from a
// caller: a field may carry megabytes, its echo must not. Pure.
package clip

import (
	"fmt"
	"unicode/utf8"
)

// Text is s cut to at most n bytes on a rune boundary, with its length
// said ("…(3145728 bytes)"); s itself when it fits.
func Text(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("…(%d bytes)", len(s))
}
