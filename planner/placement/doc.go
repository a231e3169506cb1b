// Package placement decides which hosts may take an instance before the
// allocation engine decides how: host properties and constraint
// expressions, fault and upgrade domains, capacity buffer and overbooking,
// disabled and maintenance hosts, affinity between services, placement
// policies, and the elimination report that says, rule by rule, why hosts
// were left out (seeds 000–003).
//
// It is pure: no I/O, no clock, no randomness; ties are broken by host name.
package placement
