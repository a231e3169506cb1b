package servicesfile

import (
	"runtime"
	"strings"
	"testing"
)

// TestKeyWalksAreLinear (the attack review of issue 38): the walks that
// look for bool-like and duplicate keys spelled each node's path at every
// level, so a file of deeply nested long keys cost the depth times the
// keys' length at each level (a 9 MB file took 21.6 GB in `pinfold
// diff`). Here 1,000 levels of 1,000-character keys (2 MB): the walks
// allocate a bounded multiple of what parsing the file allocates, where
// spelling every path allocates about 500 MB more.
func TestKeyWalksAreLinear(t *testing.T) {
	k := strings.Repeat("k", 1000)
	const depth = 1000
	data := []byte("services: {" + strings.Repeat(`"`+k+`": {`, depth) + `y: 1` + strings.Repeat("}", depth) + "}\n")
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	var path string
	walks := allocated(func() {
		path, _, _ = boolKey(data)
		duplicateKey(data)
	})
	if want := "services." + strings.Repeat(k+".", depth) + "y"; path != want {
		t.Fatalf("boolKey's path is %d characters, want %d", len(path), len(want))
	}
	if limit := uint64(100 << 20); walks > limit {
		t.Errorf("the key walks over a %d-byte file allocated %d MB, want at most %d MB", len(data), walks>>20, limit>>20)
	}
}
