// Package preempt chooses which running instances a request that does not
// fit may stop: on one host (a resize) or across hosts (a deploy), the
// fewest instances of strictly lower priority whose removal makes the
// request fit, preferring the lowest priorities.
//
// It is pure: no I/O, no clock, no randomness. Whether a request fits once
// some instances are gone is the caller's question (a Fits function, which
// must itself be pure); ties are broken by instance ID, then host name.
// It imports only the model; the service layer turns its choice into a
// change (victims deleted in the same commit as the preemptor's placement).
package preempt
