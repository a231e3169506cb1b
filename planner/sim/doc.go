// Package sim is a seeded simulation of the whole control plane, in the
// manner of FoundationDB's simulation testing: one process runs the real
// planner service and store over embedded etcd, simulated agents that
// heartbeat, die, return and report their instances running, failing or
// refusing after seeded delays, and a seeded random sequence of every
// operation an operator has (deploys with every strategy and rule, some
// with a static port from a small pool or dynamic ports, resizes,
// scales, replaces, removes, host changes, drains, maintenance, rebalances,
// settings, planner restarts). Time is simulated: the leader's healing pass
// runs from the simulation's clock (service.Ticker), one pass a step.
//
// After every step it checks the invariants: the planner answers, the audit
// (service.Verify) is clean (no two instances on a host hold one host
// port, among the rest), a refused operation changed nothing and names
// why, the capacity a dry run reports is what a deploy places, and every
// move, drain and heal settles or is parked with a reason within a bounded
// number of steps, and a drain's move uses the overbooking only when no
// host had nominal room for it; and a preempt step (opPreempt, its own
// random stream) deploys at a higher priority what does not fit, checking
// that no victim has the preemptor's priority or a higher one nor is of a
// service never preempted, that the
// victims are the fewest of the lowest priorities (brute force over every
// subset on small fleets), that a dry run names them and changes nothing,
// and that the audit is clean right after (nothing oversold). A panic, an internal error or a broken invariant fails
// the run with its seed, its step and the operations that led there.
//
// The simulation is all in this package's tests (it starts etcd through
// statetest); hack/sim.sh runs it for longer, see docs/TESTING.md. Nothing
// imports this package.
package sim
