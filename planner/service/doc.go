// Package service is the planner's behaviour: it registers and changes
// hosts, deploys, resizes and removes instances, and tracks agents'
// heartbeats. Each request reads the watch-fed cache in package state, plans
// with the pure engine (planner/alloc), and commits one etcd transaction
// guarded by the revisions of every host it touches; on a conflict it
// re-plans from fresh state. A request is all or nothing in the store.
//
// It reads and commits through Store (store.go), the interface it defines
// for what it needs of the state: state.Store over etcd for planners,
// state.Memory for the tests of its own behaviour.
//
// It does no Docker or kernel work: agents do that from the desired state.
package service
