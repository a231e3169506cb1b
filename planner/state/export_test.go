package state

// SetUnguarded makes the stores opened next use a client as pinfold made
// it before the member probes, keepalives and per-attempt timeouts (the
// frozen-member test's control run).
func SetUnguarded(on bool) { unguarded.Store(on) }
