package alloc_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
)

// TestFormatPieces: whole and fractional amounts at several share bases,
// negative amounts (a resize's delta) with one sign in front (they were
// "0.-5"), and share bases that are no power of ten (250 pieces of 125
// were "0.125").
func TestFormatPieces(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pieces, base int
		want         string
	}{
		{0, 100, "0"},
		{170, 100, "1.7"},
		{5, 100, "0.05"},
		{300, 100, "3"},
		{1005, 1000, "1.005"},
		{7, 10, "0.7"},
		{-50, 100, "-0.5"},
		{-25, 100, "-0.25"},
		{-100, 100, "-1"},
		{-170, 100, "-1.7"},
		{-1005, 1000, "-1.005"},
		{-1, 10000, "-0.0001"},
		{-9223372036854775808, 100, "-92233720368547758.08"},
		// Share bases that are no power of ten: rounded to 4 decimals.
		{125, 250, "0.5"},
		{-375, 250, "-1.5"},
		{1, 3000, "0.0003"},
		{2999, 3000, "0.9997"},
		{7, 0, "7 pieces"},
	} {
		t.Run(fmt.Sprintf("%d/%d", tt.pieces, tt.base), func(t *testing.T) {
			if got := alloc.FormatPieces(tt.pieces, tt.base); got != tt.want {
				t.Errorf("FormatPieces(%d, %d) = %q, want %q", tt.pieces, tt.base, got, tt.want)
			}
		})
	}
}

// TestFormatPiecesRoundTrip: at every share base, what FormatPieces
// prints reads back through PiecesOf as the same pieces (negative amounts
// by their size).
func TestFormatPiecesRoundTrip(t *testing.T) {
	t.Parallel()
	for sb := alloc.MinShareBase; sb <= alloc.MaxShareBase; sb++ {
		for _, p := range []int{1, sb / 3, sb - 1, sb + 1, 7*sb/11 + 2*sb} {
			s := alloc.FormatPieces(-p, sb)
			f, err := strconv.ParseFloat(strings.TrimPrefix(s, "-"), 64)
			if err != nil || !strings.HasPrefix(s, "-") {
				t.Fatalf("FormatPieces(%d, %d) = %q: want a negative decimal (%v)", -p, sb, s, err)
			}
			if got, err := alloc.PiecesOf("cpu", f, sb); err != nil || got != p {
				t.Fatalf("FormatPieces(%d, %d) = %q reads back as %d pieces (%v)", -p, sb, s, got, err)
			}
		}
	}
}

// TestDeltaPiecesOf: a change of CPU keeps its sign, in its pieces and in
// a refusal's amounts.
func TestDeltaPiecesOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cpu     float64
		base    int
		want    int
		wantErr string
	}{
		{-1.5, 100, -150, ""}, {0.25, 100, 25, ""}, {math.Copysign(0, -1), 100, 0, ""}, {-0.0156, 64, -1, ""}, {-1e6, 10000, -1e10, ""},
		{-0.29, 100, -29, ""}, {0.7, 100, 70, ""}, {0, 100, 0, ""},
		{0.015, 100, 0, "the nearest amounts are +0.01 and +0.02"},
		{-1.495, 100, 0, "cpu_delta = -1.495: not a whole number of pieces of a CPU (1 piece = 0.01 CPU at share base 100): the nearest amounts are -1.49 and -1.5"},
		{-0.001, 100, 0, "cpu_delta = -0.001: less than one piece of a CPU (1 piece = 0.01 CPU at share base 100): the smallest change is -0.01"},
		{1.495, 100, 0, "the nearest amounts are +1.49 and +1.5"},
		{-1e7, 100, 0, "cpu_delta = -1e+07: want a change of -1000000 to 1000000 CPUs"},
		{math.NaN(), 100, 0, "cpu_delta = NaN: want a number of CPUs"},
		{math.Inf(-1), 100, 0, "cpu_delta = -Inf: want a change"},
	} {
		got, err := alloc.DeltaPiecesOf("cpu_delta", tt.cpu, tt.base)
		checkPieces(t, fmt.Sprintf("DeltaPiecesOf(%v, %d)", tt.cpu, tt.base), got, err, tt.want, tt.wantErr)
	}
}

// checkPieces checks one conversion of a CPU amount: an invalid-input
// error containing wantErr, or want pieces when wantErr is "".
func checkPieces(t *testing.T, call string, got int, err error, want int, wantErr string) {
	t.Helper()
	if wantErr != "" {
		var ae *alloc.Error
		if !errors.As(err, &ae) || ae.Code != alloc.CodeInvalid || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s = %d, %v; want an invalid-input error with %q", call, got, err, wantErr)
		}
		return
	}
	if err != nil || got != want {
		t.Errorf("%s = %d, %v; want %d", call, got, err, want)
	}
}

// TestIsDecimal: the decimal forms a CPU amount takes, and Go's other
// float syntax, which ParseFloat takes and a CPU amount does not.
func TestIsDecimal(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"1.7": true, "0": true, "-0": true, "+0.5": true, ".5": true, "5.": true, "1.10": true, "1.7e0": true, "17E-1": true, "1e+2": true,
		"": false, "+": false, ".": false, "1_0": false, "0x1p-1": false, "0X1P0": false, "inf": false, "Infinity": false, "NaN": false,
		"1e": false, "1e+": false, "1.5.3": false, " 1": false, "1 ": false, "--1": false, "e5": false,
	} {
		if got := alloc.IsDecimal(s); got != want {
			t.Errorf("IsDecimal(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestPiecesOfRoundTripAll: every amount from 0 to 2 CPUs, and the top
// 2 CPUs below MaxCPUs, that FormatPieces writes (or the float p/base,
// as ps -o json writes it) reads back through PiecesOf as its pieces, at bases that are powers of ten and bases that
// are not (4 decimals), and the amount half a piece above is refused.
func TestPiecesOfRoundTripAll(t *testing.T) {
	t.Parallel()
	for _, sb := range []int{10, 16, 30, 32, 64, 100, 128, 250, 1000, 1024, 3000, 4096, 7777, 9999, 10000} {
		t.Run(strconv.Itoa(sb), func(t *testing.T) {
			t.Parallel()
			top := int(alloc.MaxCPUs) * sb
			for _, r := range [][2]int{{0, 2 * sb}, {top - 2*sb, top}} {
				for p := r[0]; p <= r[1]; p++ {
					s := alloc.FormatPieces(p, sb)
					f, err := strconv.ParseFloat(s, 64)
					if err != nil {
						t.Fatalf("FormatPieces(%d, %d) = %q: %v", p, sb, s, err)
					}
					if got, err := alloc.PiecesOf("cpu", f, sb); err != nil || got != p {
						t.Fatalf("FormatPieces(%d, %d) = %q reads back as %d pieces (%v)", p, sb, s, got, err)
					}
					// ps -o json's cpu_planned, the float's shortest decimal
					// (0.0003333333333333333), which plan files read.
					if got, err := alloc.PiecesOf("cpu", float64(p)/float64(sb), sb); err != nil || got != p {
						t.Fatalf("%d/%d reads back as %d pieces (%v)", p, sb, got, err)
					}
					if p == top {
						continue
					}
					half := (float64(p) + 0.5) / float64(sb)
					if got, err := alloc.PiecesOf("cpu", half, sb); err == nil {
						t.Fatalf("PiecesOf(%v, %d) = %d: half a piece off the grid was taken", half, sb, got)
					}
				}
			}
		})
	}
}

func ExampleFormatPieces() {
	fmt.Println(alloc.FormatPieces(170, 100), alloc.FormatPieces(1005, 1000), alloc.FormatPieces(300, 100))
	// Output: 1.7 1.005 3
}

// TestFormatBytes: sizes in messages are in binary units, exact when shown
// without decimals, and never the same text for two different sizes near
// a whole unit.
func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{900, "900 B"},
		{1 << 10, "1 KiB"},
		{6 << 20, "6 MiB"},
		{1 << 30, "1 GiB"},
		{3 << 29, "1.5 GiB"},
		{108447924224, "101 GiB"},
		{1<<30 - 1, "1073741823 B"},
		{1<<30 + 1<<20, "1025 MiB"},
		{1<<30 + 11<<20, "1.01 GiB"},
		{1<<30 + 1, "1073741825 B"},
		{-(1 << 30), "-1 GiB"},
		{-1 << 63, "-8 EiB"},
		{1<<63 - 1, "9223372036854775807 B"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			if got := alloc.FormatBytes(tt.n); got != tt.want {
				t.Errorf("FormatBytes(%d) = %q, want %q", tt.n, got, tt.want)
			}
		})
	}
}

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  error
	}{
		{"512MiB", 512 << 20, nil}, {"1.5GiB", 3 << 29, nil}, {"1G", 1e9, nil}, {" 64 ", 64, nil}, {"2KB", 2000, nil},
		{"", 0, alloc.ErrNotASize}, {"-1MiB", 0, alloc.ErrNotASize}, {"1.2.3G", 0, alloc.ErrNotASize}, {"5XB", 0, alloc.ErrNotASize},
		{"9999999TiB", 0, alloc.ErrSizeTooLarge},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := alloc.ParseBytes(tc.in)
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("ParseBytes(%q) = %d, %v; want %d, %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}
