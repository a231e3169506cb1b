// Package alloc is pinfold's allocation engine: how many instances of a
// request each host can take (capacity), which hosts get how many (deploy
// strategies), which CPUs, pieces, NUMA node and memory each new instance gets
// (placement), and how a running instance grows or shrinks in place (resize).
//
// The resource model is seed 004 (Eru's): a logical CPU is worth ShareBase
// pieces. A CPU-bound request of X.Y CPUs gets X whole CPUs (ShareBase pieces
// of each, each from a CPU with that many free pieces) plus at most one
// fragment CPU carrying round(Y×ShareBase) pieces. Memory-first requests are
// counted by memory only and get a CPU quota over the host's shared pool.
//
// It is pure: no I/O, no clock, no randomness, no logging. Every ordering is
// documented and ties are broken by ID (CPU ID, NUMA node ID, host name), so
// the same input always gives the same plan. Errors are values (*Error) with a
// stable Code for API and CLI mapping.
//
// The numbered algorithms live in capacity.go (counting), place.go (choosing
// CPUs), strategy.go (choosing hosts) and resize.go.
package alloc
