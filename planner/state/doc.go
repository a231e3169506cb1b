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
package state
