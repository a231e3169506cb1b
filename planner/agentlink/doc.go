// Package agentlink is the agent link's wire: the one connection an agent
// holds to the planner, over which it heartbeats and receives its host's
// desired state.
//
// Why a link of its own: an agent that heartbeats with unary calls and
// watches with a server stream holds two HTTP/1.1 connections (or one
// HTTP/2 connection) for as long as it runs, and net/http holds three
// goroutines (29 KiB of stacks) and 8 to 16 KiB of buffers per agent for
// them; at 10,000 agents that was 1.2 GiB of planner memory (issue 27).
// The link is one HTTP/1.1 request upgraded to this protocol (101
// Switching Protocols) and then taken from net/http: the planner serves
// it with two shallow goroutines of its own and no buffers between
// frames.
//
// The request: GET Path?host=NAME with "Connection: Upgrade" and
// "Upgrade: pinfold-link.v1", the agent's client certificate as for any
// call. After the 101 answer each side writes frames: a 4-byte big-endian
// length of what follows, a kind byte, then the kind's protobuf message
// (pinfoldv1) or text:
//
//	agent → planner  KindHeartbeat        HeartbeatRequest
//	planner → agent  KindHeartbeatAnswer  HeartbeatResponse
//	planner → agent  KindHeartbeatError   error text: the heartbeat was refused; the link stays
//	planner → agent  KindDesired          WatchInstancesResponse (the host's desired set, after each change)
//	planner → agent  KindError            error text: the link ends; the planner closes it
//
// Error text is the Connect code's name, a newline, and the message. A
// planner without the link answers 404: the agent falls back to the
// Heartbeat and WatchInstances calls.
package agentlink
