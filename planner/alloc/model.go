package alloc

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/topology"
)

// Share base bounds: 10 pieces (1/10 CPU) to 10000 (1/10000 CPU).
const (
	MinShareBase     = 10
	MaxShareBase     = 10000
	DefaultShareBase = 100
)

// Params are the planner-wide settings.
type Params struct {
	// ShareBase is how many pieces one logical CPU is worth.
	ShareBase int
	// MaxFragmentCores caps how many CPUs of a host may carry fragments
	// (partly used CPUs); -1 means no cap.
	MaxFragmentCores int
}

// DefaultParams are ShareBase 100 and no fragment cap.
func DefaultParams() Params { return Params{ShareBase: DefaultShareBase, MaxFragmentCores: -1} }

// Validate checks the ranges.
func (p Params) Validate() error {
	if p.ShareBase < MinShareBase || p.ShareBase > MaxShareBase {
		return invalid("share_base", p.ShareBase, "want %d..%d", MinShareBase, MaxShareBase)
	}
	if p.MaxFragmentCores < -1 {
		return invalid("max_fragment_cores", p.MaxFragmentCores, "want -1 (no cap) or a count >= 0")
	}
	return nil
}

// CPU is one logical CPU of a host as the planner accounts it.
type CPU struct {
	ID       cpuset.CPUID
	Capacity int // pieces; more than ShareBase means deliberately oversold
	Used     int // pieces held by instances
	// WholeCores marks a CPU a whole-cores instance holds: no other
	// instance gets a piece of it, however many pieces Capacity has spare
	// (an oversold CPU, or capacity the overbooking raised).
	WholeCores bool
}

// NUMANode is one NUMA node of a host as the planner accounts it.
type NUMANode struct {
	ID          cpuset.NUMANodeID
	CPUs        cpuset.CPUs
	MemoryBytes int64
	MemoryUsed  int64
}

// Host is one host's capacity and usage. CPUs and NUMANodes are sorted by ID.
// A host without NUMANodes is planned as one pool, and its placements report
// NUMA node -1.
type Host struct {
	Name        string
	CPUs        []CPU
	MemoryBytes int64
	MemoryUsed  int64
	NUMANodes   []NUMANode
	// Topology, when known, lets whole CPUs be taken as whole physical cores
	// inside one L3 group. Only siblings and L3 groups are read.
	Topology *topology.Topology
	// Instances counts the running instances of each service on the host.
	Instances map[string]int
	// MemoryFirst counts the host's memory-first instances by CPU quota
	// (pieces): the shared pool never shrinks below the largest (a bound
	// placement leaves it enough CPUs).
	MemoryFirst map[int]int
	// Ports counts the instances holding each host port (the placement
	// rule Ports reads it; the engine does not).
	Ports map[int]int
	// Memo, when set, caches capacity per request shape; only a Host that
	// never changes may have one (a changed copy must set it to nil).
	Memo *CapacityMemo
}

// SharedPool is the memory-first shared pool: the host's CPUs no instance
// holds pieces of, less the isolated ones (isolcpus=: the scheduler does
// not balance onto them). Memory-first instances run on it with their quota;
// the planner sends it to the host's agent, which uses it as their cpuset.
func (h *Host) SharedPool() cpuset.CPUs {
	var ids []cpuset.CPUID
	for _, c := range h.CPUs {
		if c.Used == 0 && c.Capacity > 0 && (h.Topology == nil || !h.Topology.Isolated.Contains(c.ID)) {
			ids = append(ids, c.ID)
		}
	}
	return cpuset.Of(ids...)
}

// PoolFloor is the largest memory-first quota on the host, in pieces: the
// shared pool must keep at least that many pieces of CPUs.
func (h *Host) PoolFloor() int {
	m := 0
	for q, n := range h.MemoryFirst {
		if n > 0 {
			m = max(m, q)
		}
	}
	return m
}

// KeptPool is the part of the shared pool that bound placement leaves to
// the memory-first instances: the largest quota (PoolFloor) rounded up to
// whole CPUs, taken from the highest IDs of the pool; all of a pool that
// is smaller. These CPUs are free, yet no bound instance is placed on
// them, which is why capacity can be below the free CPUs (host show and
// capacity say so).
func (h *Host) KeptPool(shareBase int) cpuset.CPUs {
	if shareBase < 1 {
		return cpuset.CPUs{}
	}
	keep := (h.PoolFloor() + shareBase - 1) / shareBase
	if keep == 0 {
		return cpuset.CPUs{}
	}
	ids := h.SharedPool().Slice()
	return cpuset.Of(ids[max(0, len(ids)-keep):]...)
}

// Request asks for Count new instances of Service.
type Request struct {
	Service string
	Count   int
	// Pieces is the CPU asked for, in pieces: round(cpu × ShareBase).
	Pieces int
	// Bind selects CPU-bind mode; false is memory-first mode.
	Bind bool
	// WholeCores (bound, whole CPUs only) gives each instance whole
	// physical cores: no SMT sibling of its CPUs runs another instance.
	WholeCores  bool
	MemoryBytes int64
	Strategy    Strategy
	// MaxPerHost caps the service's resulting instance count on any host; 0 = no cap.
	MaxPerHost int
	// Seed breaks ties between equally good hosts: 0 orders them by name;
	// any other value by a hash of (Seed, name), so concurrent requests
	// with different seeds spread over equal hosts instead of colliding on
	// the first. The result stays a pure function of the request.
	Seed uint64
	// Rank orders equally good hosts before Seed does: a lower rank is
	// preferred; hosts without a rank come after ranked ones. The placement
	// layer sets it from a placement policy (nodes_order, load_avg, spread).
	Rank map[string]int
	// Limit, when set, caps the new instances each listed host may take
	// (the placement layer's capacity buffer), and LimitWhy says what
	// limits each ("max_per_host", "cpu buffer", "static port"): a refusal
	// names it, as capacity does, instead of the host's own capacity's.
	Limit    map[string]int
	LimitWhy map[string]string
	// Fixed, when set, is how many new instances each host gets (the
	// placement layer decided them, e.g. to spread over fault domains); the
	// strategy is not consulted and Count must equal their sum.
	Fixed map[string]int
}

// Placement is one instance's allocation on a host: the domain model's
// Allocation (CPUs empty and CPUQuota in pieces for a memory-first
// instance; NUMANode -1 for a cross-node plan, a memory-first instance or a
// host without NUMA info). The engine leaves MemorySoft to its caller.
type Placement struct {
	Host string `json:"host"`
	model.Allocation
}

// MaxCPUs is the largest CPU amount a request may give (PiecesOf).
const MaxCPUs = 1e6

// PiecesOf converts a decimal CPU amount to pieces (0.29 at base 100 is
// 29: the float's 28.999… is taken to the nearest piece). It rejects NaN,
// infinities, negatives, amounts beyond 1,000,000 CPUs, a share base
// below 1, and an amount that is not a whole number of pieces (0.505 at
// base 100): rounded, it would be a size the user did not ask for. The
// only slack is the float's own noise, a few units in the last place of
// cpu × base (999999.999999 at 10000 is 1/100 piece off, refused). At a
// share base that is not a power of ten an amount of at most 4 decimals
// that is a piece rounded to 4 decimals, as FormatPieces writes it
// (0.0003 for 1 piece of 3000), is taken as that piece; 0.00034 is not.
func PiecesOf(field string, cpu float64, shareBase int) (int, error) {
	if cpu < 0 || math.IsInf(cpu, 0) || cpu > MaxCPUs {
		return 0, invalid(field, cpu, "want a number of CPUs from 0 to 1000000")
	}
	return piecesOf(field, cpu, shareBase, 1, false)
}

// DeltaPiecesOf is PiecesOf for a change of CPU (a resize's delta), which
// may be negative: -1.5 at base 100 is -150 pieces, and a refusal names
// the amount and the nearest ones with their sign, as a resize takes them
// (-1.495: the nearest amounts are -1.49 and -1.5; 0.015: +0.01 and
// +0.02).
func DeltaPiecesOf(field string, cpu float64, shareBase int) (int, error) {
	if math.IsInf(cpu, 0) || math.Abs(cpu) > MaxCPUs {
		return 0, invalid(field, cpu, "want a change of -1000000 to 1000000 CPUs")
	}
	if cpu < 0 {
		return piecesOf(field, -cpu, shareBase, -1, true)
	}
	return piecesOf(field, cpu, shareBase, 1, true)
}

// piecesOf converts the size cpu (0..MaxCPUs, or NaN) of an amount of
// sign ±1 to pieces, and names it with its sign when it refuses it (a
// delta's amounts with a + too).
func piecesOf(field string, cpu float64, shareBase, sign int, delta bool) (int, error) {
	if math.IsNaN(cpu) {
		return 0, invalid(field, cpu, "want a number of CPUs from 0 to 1000000")
	}
	value := float64(sign) * cpu
	if shareBase < 1 {
		return 0, invalid(field, value, "no pieces at share base %d (want %d..%d)", shareBase, MinShareBase, MaxShareBase)
	}
	sb := float64(shareBase)
	x := cpu * sb
	p := math.Round(x)
	if nearInt(x, p) {
		return sign * int(p), nil
	}
	if pow10(len(strconv.Itoa(shareBase))-1) != uint64(shareBase) {
		// q/10000 CPU is within half of 1/10000 of p pieces: all in whole
		// numbers below 2^53, so the comparison is exact.
		if d := cpu * 1e4; nearInt(d, math.Round(d)) && 2*math.Abs(math.Round(d)*sb-p*1e4) <= sb {
			return sign * int(p), nil // as FormatPieces rounds it
		}
	}
	amount := func(n int) string {
		if delta && n > 0 {
			return "+" + FormatPieces(n, shareBase)
		}
		return FormatPieces(n, shareBase)
	}
	lo := int(math.Floor(x))
	if lo == 0 {
		smallest := "the smallest amount above 0 is"
		if delta {
			smallest = "the smallest change is"
		}
		return 0, invalid(field, value, "less than one piece of a CPU (1 piece = %s CPU at share base %d): %s %s",
			FormatPieces(1, shareBase), shareBase, smallest, amount(sign))
	}
	return 0, invalid(field, value, "not a whole number of pieces of a CPU (1 piece = %s CPU at share base %d): the nearest amounts are %s and %s",
		FormatPieces(1, shareBase), shareBase, amount(sign*lo), amount(sign*(lo+1)))
}

// IsDecimal says whether s is a decimal number: an optional sign, digits
// with an optional fraction, an optional exponent ("1.7", "-.5", "17e-1").
// strconv.ParseFloat also takes Go's other float syntax, which is no CPU
// amount a user writes: "1_0" (10), "0x1p-1" (0.5), "inf", "nan".
func IsDecimal(s string) bool {
	i, n := 0, len(s)
	if i < n && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := func() int {
		j := i
		for i < n && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - j
	}
	m := digits()
	if i < n && s[i] == '.' {
		i++
		m += digits()
	}
	if m == 0 {
		return false
	}
	if i < n && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < n && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == n
}

// nearInt says whether x, a product of a parsed decimal and a whole
// number (at most 1e10 here), is the whole number n but for the float's
// noise: the decimal's nearest float is off by half a unit in its last
// place and the product by as much again, about 2.2e-16 of x in all;
// 1e-15 of x leaves room, and 1e-9 covers x near 0.
func nearInt(x, n float64) bool { return math.Abs(x-n) <= 1e-9+1e-15*x }

// FormatPieces renders pieces as a decimal CPU amount ("1.7", "-0.5" for a
// negative delta). With a share base that is a power of ten the amount is
// exact; with any other it is rounded to 4 decimals, which still gives the
// same pieces back through PiecesOf (1/3000 CPU is "0.0003"). A share base
// below 1 (invalid) renders the bare count ("7 pieces").
func FormatPieces(pieces, shareBase int) string {
	if shareBase < 1 {
		return fmt.Sprintf("%d pieces", pieces)
	}
	sign, n := "", uint64(pieces)
	if pieces < 0 {
		sign, n = "-", uint64(-(pieces+1))+1 // no overflow at the smallest int
	}
	sb := uint64(shareBase)
	whole, frac := n/sb, n%sb
	if frac == 0 {
		return sign + strconv.FormatUint(whole, 10)
	}
	var s string
	if digits := len(strconv.Itoa(shareBase)) - 1; pow10(digits) == sb {
		s = fmt.Sprintf("%d.%0*d", whole, digits, frac)
	} else {
		// frac/sb is at most 9998/9999 here, so it rounds below 1.
		s = strconv.FormatUint(whole, 10) + strconv.FormatFloat(float64(frac)/float64(sb), 'f', 4, 64)[1:]
	}
	s = strings.TrimRight(s, "0")
	return sign + s
}

// Size is a memory size in bytes that prints as FormatBytes does, for the
// value of an error's field.
type Size int64

func (s Size) String() string { return FormatBytes(int64(s)) }

// ErrNotASize and ErrSizeTooLarge are ParseBytes' refusals.
var (
	ErrNotASize     = errors.New("not a size")
	ErrSizeTooLarge = errors.New("not a size pinfold can hold")
)

// ParseBytes reads a byte size as deploy's --memory and a services file's
// memory take it: a plain number is bytes; K, M, G, T (and KB, MB, GB, TB)
// are powers of 1000; Ki, Mi, Gi, Ti (and KiB, MiB, GiB, TiB) powers of
// 1024; decimals are allowed ("1.5GiB"); no sign. The caller names the
// field in its error.
func ParseBytes(s string) (int64, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], strings.TrimSpace(in[i:])
	m, ok := byteUnits[unit]
	if num == "" || strings.Count(num, ".") > 1 || !ok {
		return 0, ErrNotASize
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f*m > math.MaxInt64/2 {
		return 0, ErrSizeTooLarge
	}
	return int64(math.Round(f * m)), nil
}

var byteUnits = map[string]float64{"": 1, "B": 1,
	"K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
	"Ki": 1 << 10, "KiB": 1 << 10, "Mi": 1 << 20, "MiB": 1 << 20, "Gi": 1 << 30, "GiB": 1 << 30, "Ti": 1 << 40, "TiB": 1 << 40}

// FormatBytes renders a memory size in binary units for messages, in the
// style of the command line's tables ("1 GiB", "1.5 GiB", "512 MiB",
// "900 B"). A size shown without decimals is exact; one with decimals is
// rounded to two places, and a size that would round to a whole number it
// is not (1 GiB less 1 byte) drops to a smaller unit, down to bytes. So two
// different sizes in one message ("1 GiB free, 1.5 GiB needed") never
// print the same.
func FormatBytes(n int64) string {
	sign, u := "", uint64(n)
	if n < 0 {
		sign, u = "-", uint64(-(n+1))+1 // no overflow at the smallest int64
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for i+1 < len(units) && u >= 1<<(10*(i+1)) {
		i++
	}
	for ; i > 0; i-- {
		div := uint64(1) << (10 * i)
		if u%div == 0 {
			return sign + strconv.FormatUint(u/div, 10) + " " + units[i]
		}
		s := strings.TrimRight(strconv.FormatFloat(float64(u)/float64(div), 'f', 2, 64), "0")
		if !strings.HasSuffix(s, ".") {
			return sign + s + " " + units[i]
		}
	}
	return sign + strconv.FormatUint(u, 10) + " B"
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}
