// Package state is the planner's state in etcd: the documents, their keys,
// a watch-fed in-memory cache with the index of hosts that may take work,
// and optimistic transactions that commit a plan only if every host document
// it touches is still at the revision the plan was made from.
//
// Keys (all JSON values, versioned by the /v1/ segment):
//
//	/pinfold/v1/config                     planner-wide settings (share base)
//	/pinfold/v1/hosts/<host>               registration: topology, capacity, flags
//	/pinfold/v1/alloc/<host>               usage: pieces per CPU, memory, per NUMA node, instance counts
//	/pinfold/v1/instances/<host>/<id>      desired instance
//	/pinfold/v1/status/<host>/<id>         observed instance (written for the agent)
//	/pinfold/v1/services/<name>            service spec
//	/pinfold/v1/live/<host>                agent heartbeat, attached to a lease
//
// One allocation document per host makes a transaction's compare set exactly
// the hosts a request touches, so requests on different hosts never wait on
// each other. Every invariant (Σ instances == allocation document, never
// above capacity) can be re-checked from the store alone: see Verify.
//
// The package is layered by concern, each layer knowing only the one
// below it:
//
//	cache.go    the documents and their indexes (schedulable hosts,
//	            instances by service, by ID and in flight, the sorted
//	            orders pages read, each host's last change). Pure: no
//	            etcd, no clock, no I/O; fed one key at a time (apply),
//	            it reports what each key changed (effect).
//	memo.go     the engine-view memo: per host its allocation-engine view
//	            and placement view, the schedulable hosts' list (Placed)
//	            and its room index; dropped by the effects the cache
//	            reports. Holds no documents: the caller passes them.
//	replica.go  cache and memo under one lock, with the waiters for a
//	            revision and for a host's next change; every read the
//	            service makes, and Pending (pending.go) over it.
//	store.go    Store, the etcd shell: load, watch, guarded commits with
//	            the commit marker (store.go), leases and the election
//	            (agents.go), events and request records, the failover
//	            client (failover.go). It feeds its replica from the watch.
//	memory.go   Memory, the same replica with commits checked and applied
//	            in this process: for tests of the service without etcd.
//
// The service consumes the store through its own interface
// (planner/service.Store); contract_test.go runs one set of cases against
// Store on embedded etcd and against Memory, so the two cannot drift.
//
// Must not: import planner/service or anything above it; log, read the
// clock or do I/O below store.go (cache.go and memo.go are table-tested
// without any of it).
package state
