package cpuset

import (
	"fmt"
	"iter"
	"math/bits"
	"strconv"
	"strings"
)

// CPUID is a logical CPU number as in /sys/devices/system/cpu/cpuN.
type CPUID int

// NUMANodeID is a NUMA node number as in /sys/devices/system/node/nodeN.
// It is never called NodeID: in pinfold a "node agent" runs on a host.
type NUMANodeID int

// ID is the constraint for set elements.
type ID interface{ ~int }

// MaxID bounds the IDs Parse accepts, so hostile or corrupt input such as
// "0-4294967295" is an error rather than a huge allocation. x86-64's largest
// NR_CPUS is 8192 (IDs 0..8191); revisit if a supported platform allows more.
const MaxID = 8191

// maxInputLen bounds the text Parse looks at. The longest canonical list of
// IDs up to MaxID ("0,2,4,…,8190") is about 20 KB; anything far beyond is junk.
const maxInputLen = 64 << 10

// Set is an immutable set of IDs. The zero value is the empty set.
// No method modifies its receiver, and results never share storage with
// anything a caller can change.
type Set[T ID] struct {
	words []uint64 // bit i%64 of words[i/64] set <=> ID i present; no trailing zero words
}

type (
	// CPUs is the content of cpuset.cpus, cpulist and thread_siblings_list.
	CPUs = Set[CPUID]
	// Mems is the content of cpuset.mems and node/online.
	Mems = Set[NUMANodeID]
)

// Of returns the set of ids. It panics on an ID outside 0..MaxID: that is a
// programmer error, input from outside goes through Parse.
func Of[T ID](ids ...T) Set[T] {
	var b builder
	for _, id := range ids {
		if id < 0 || int(id) > MaxID {
			panic(fmt.Sprintf("cpuset: id %d outside 0..%d", int(id), MaxID))
		}
		b.add(int(id))
	}
	return Set[T]{words: b.done()}
}

// Range returns the set lo..hi inclusive; empty when hi < lo. It panics on IDs
// outside 0..MaxID, like Of.
func Range[T ID](lo, hi T) Set[T] {
	if hi < lo {
		return Set[T]{}
	}
	if lo < 0 || int(hi) > MaxID {
		panic(fmt.Sprintf("cpuset: range %d-%d outside 0..%d", int(lo), int(hi), MaxID))
	}
	var b builder
	b.addRange(int(lo), int(hi))
	return Set[T]{words: b.done()}
}

// ParseError reports a malformed list and quotes the whole input.
type ParseError struct {
	Input  string // the text given to Parse (cut to 64 bytes)
	Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("cpuset: parse %q: %s", e.Input, e.Reason)
}

// Parse reads the Linux list format. See the package documentation for what
// it accepts.
func Parse[T ID](s string) (Set[T], error) {
	fail := func(reason string, args ...any) (Set[T], error) {
		in := s
		if len(in) > 64 {
			in = in[:64] + "…"
		}
		return Set[T]{}, &ParseError{Input: in, Reason: fmt.Sprintf(reason, args...)}
	}
	if len(s) > maxInputLen {
		return fail("longer than %d bytes", maxInputLen)
	}
	t := strings.TrimSpace(s)
	if t == "" {
		return Set[T]{}, nil
	}
	var b builder
	for elem := range strings.SplitSeq(t, ",") {
		if elem == "" {
			return fail("empty element")
		}
		loS, hiS, isRange := strings.Cut(elem, "-")
		lo, err := parseID(loS)
		if err != nil {
			return fail("element %q: %v", elem, err)
		}
		hi := lo
		if isRange {
			if hi, err = parseID(hiS); err != nil {
				return fail("element %q: %v", elem, err)
			}
			if hi < lo {
				return fail("element %q: range end below start", elem)
			}
		}
		b.addRange(lo, hi)
	}
	return Set[T]{words: b.done()}, nil
}

// parseID accepts only plain decimal digits: no sign, no space, no base prefix.
func parseID(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("missing number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a decimal id", s)
		}
	}
	if len(s) > 5 { // 8191 has 4 digits; avoids overflow on long digit strings
		return 0, fmt.Errorf("id %s above maximum %d", s, MaxID)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a decimal id", s)
	}
	if n > MaxID {
		return 0, fmt.Errorf("id %d above maximum %d", n, MaxID)
	}
	return n, nil
}

// ParseCPUs parses a CPU list (type inference cannot infer T from a string).
func ParseCPUs(s string) (CPUs, error) { return Parse[CPUID](s) }

// ParseMems parses a NUMA node list.
func ParseMems(s string) (Mems, error) { return Parse[NUMANodeID](s) }

// MustParseCPUs is for tests and fixtures; it panics on malformed input.
func MustParseCPUs(s string) CPUs {
	c, err := ParseCPUs(s)
	if err != nil {
		panic(err)
	}
	return c
}

// MustParseMems is for tests and fixtures; it panics on malformed input.
func MustParseMems(s string) Mems {
	m, err := ParseMems(s)
	if err != nil {
		panic(err)
	}
	return m
}

// String returns the canonical list format: ascending, maximal ranges, ""
// for the empty set.
func (s Set[T]) String() string {
	var sb strings.Builder
	// Run by run, 64 IDs at a time through full and empty words: the set
	// of all 8,192 CPUs (every CPU's L3 group in the largest topology)
	// takes 128 word steps, not 8,192 bit steps.
	for lo := s.next(0, true); lo >= 0; {
		hi := s.next(lo, false) // the first ID after the run
		if hi < 0 {
			hi = len(s.words) * 64
		}
		if sb.Len() > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Itoa(lo))
		if hi-1 > lo {
			sb.WriteByte('-')
			sb.WriteString(strconv.Itoa(hi - 1))
		}
		lo = s.next(hi, true)
	}
	return sb.String()
}

// next is the first ID from i on that is in the set (in true) or not in it
// (in false), or -1 when there is none within the set's words.
func (s Set[T]) next(i int, in bool) int {
	for w := i / 64; w < len(s.words); w++ {
		x := s.words[w]
		if !in {
			x = ^x
		}
		if w == i/64 {
			x &= ^uint64(0) << (i % 64)
		}
		if x != 0 {
			return w*64 + bits.TrailingZeros64(x)
		}
	}
	return -1
}

// Len is the number of IDs in the set.
func (s Set[T]) Len() int {
	n := 0
	for _, w := range s.words {
		n += bits.OnesCount64(w)
	}
	return n
}

// IsEmpty reports whether the set has no IDs.
func (s Set[T]) IsEmpty() bool { return len(s.words) == 0 }

// Contains reports whether id is in the set.
func (s Set[T]) Contains(id T) bool {
	i := int(id)
	if i < 0 || i/64 >= len(s.words) {
		return false
	}
	return s.words[i/64]&(1<<(uint(i)%64)) != 0
}

// Union returns s ∪ o.
func (s Set[T]) Union(o Set[T]) Set[T] {
	long, short := s.words, o.words
	if len(short) > len(long) {
		long, short = short, long
	}
	if len(long) == 0 {
		return Set[T]{}
	}
	w := make([]uint64, len(long))
	copy(w, long)
	for i, x := range short {
		w[i] |= x
	}
	return Set[T]{words: w}
}

// Intersect returns s ∩ o.
func (s Set[T]) Intersect(o Set[T]) Set[T] {
	n := min(len(s.words), len(o.words))
	w := make([]uint64, n)
	for i := range n {
		w[i] = s.words[i] & o.words[i]
	}
	return Set[T]{words: trim(w)}
}

// Difference returns s \ o.
func (s Set[T]) Difference(o Set[T]) Set[T] {
	if len(s.words) == 0 {
		return Set[T]{}
	}
	w := make([]uint64, len(s.words))
	copy(w, s.words)
	for i := range min(len(w), len(o.words)) {
		w[i] &^= o.words[i]
	}
	return Set[T]{words: trim(w)}
}

// IsSubsetOf reports whether every ID of s is in o.
func (s Set[T]) IsSubsetOf(o Set[T]) bool {
	if len(s.words) > len(o.words) {
		return false
	}
	for i, x := range s.words {
		if x&^o.words[i] != 0 {
			return false
		}
	}
	return true
}

// Equal reports whether s and o hold the same IDs.
func (s Set[T]) Equal(o Set[T]) bool {
	if len(s.words) != len(o.words) {
		return false
	}
	for i, x := range s.words {
		if x != o.words[i] {
			return false
		}
	}
	return true
}

// Min returns the smallest ID and true, or 0 and false for the empty set.
func (s Set[T]) Min() (T, bool) {
	for i, w := range s.words {
		if w != 0 {
			return T(i*64 + bits.TrailingZeros64(w)), true
		}
	}
	return 0, false
}

// All yields the IDs in ascending order.
func (s Set[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		for i, w := range s.words {
			for w != 0 {
				b := bits.TrailingZeros64(w)
				if !yield(T(i*64 + b)) {
					return
				}
				w &= w - 1
			}
		}
	}
}

// Slice returns the IDs in ascending order in a fresh slice.
func (s Set[T]) Slice() []T {
	out := make([]T, 0, s.Len())
	for id := range s.All() {
		out = append(out, id)
	}
	return out
}

// MarshalText renders the list format; JSON carries a set as that string.
func (s Set[T]) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses the list format strictly.
func (s *Set[T]) UnmarshalText(b []byte) error {
	v, err := Parse[T](string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// builder accumulates IDs; only Of, Range and Parse use it, each on validated IDs.
type builder struct{ words []uint64 }

func (b *builder) add(i int) {
	for i/64 >= len(b.words) {
		b.words = append(b.words, 0)
	}
	b.words[i/64] |= 1 << (uint(i) % 64)
}

func (b *builder) addRange(lo, hi int) {
	if hi/64 >= len(b.words) {
		w := make([]uint64, hi/64+1)
		copy(w, b.words)
		b.words = w
	}
	for i := lo; i <= hi; {
		if i%64 == 0 && i+63 <= hi {
			b.words[i/64] = ^uint64(0)
			i += 64
			continue
		}
		b.words[i/64] |= 1 << (uint(i) % 64)
		i++
	}
}

func (b *builder) done() []uint64 { return trim(b.words) }

func trim(w []uint64) []uint64 {
	n := len(w)
	for n > 0 && w[n-1] == 0 {
		n--
	}
	if n == 0 {
		return nil
	}
	return w[:n]
}
