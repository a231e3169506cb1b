package placement

import (
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
)

// A host whose count of the service is below 0 (a corrupt usage doc):
// Auto ranked it before every host at 0 while the index took it as free;
// both now count it as none (alloc's candidateOf).
func TestIndexNegativeInstances(t *testing.T) {
	a := idxHost("a", 1, 4, 8<<30, 0)
	a.Resources.Instances["svc"] = -1
	b := idxHost("b", 4, 4, 8<<30, 0)
	hosts := []*Host{a, b}
	x := NewIndex(params, hosts, nil)
	r := Request{Request: alloc.Request{Service: "svc", Count: 1, Strategy: alloc.Auto, Pieces: 100, Bind: true, MemoryBytes: 1 << 20}}
	idxCompare(t, x, Settings{}, hosts, r, idxAnswers)
}

func TestIndexDuplicateNames(t *testing.T) {
	for i := range 50 {
		a := idxHost("a", 4, 4, 8<<30, 0)
		a2 := idxHost("a", 4, 8, 8<<30, 0)
		for c := 0; c < 4; c++ {
			a2.Resources.CPUs[c].Used = 100
		}
		var hosts []*Host
		for j := 0; j < 40; j++ {
			if (i+j)%2 == 0 {
				hosts = append(hosts, a)
			} else {
				hosts = append(hosts, a2)
			}
		}
		x := NewIndex(params, hosts, nil)
		r := Request{Request: alloc.Request{Service: "svc", Count: 1, Strategy: alloc.Auto, Pieces: 100, Bind: true, MemoryBytes: 1 << 20}}
		idxCompare(t, x, Settings{}, hosts, r, idxAnswers)
	}
}

// An index built from a prev with no kept rooms, then a pending copy with no
// hosts, and a one-host list.
func TestIndexEdges(t *testing.T) {
	r := Request{Request: alloc.Request{Service: "svc", Count: 1, Strategy: alloc.Auto, Pieces: 100, Bind: true, MemoryBytes: 1 << 20}}
	x := NewIndex(params, nil, nil)
	if _, ok := x.First(params, Settings{}, nil, r); ok {
		t.Fatal("answered over no hosts")
	}
	a := idxHost("a", 0, 4, 8<<30, 0)
	x = NewIndex(params, []*Host{a}, x)
	idxCompare(t, x, Settings{}, []*Host{a}, r, idxDeclines) // a is full: the full plan refuses
	b := idxHost("a", 2, 4, 8<<30, 0)
	idxCompare(t, x, Settings{}, []*Host{b}, r, idxAnswers)
}
