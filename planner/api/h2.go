package api

import (
	"net/http"

	"connectrpc.com/connect"
)

// HTTP/2 settings of the API server, sized for agent connections: every
// agent holds one connection for as long as it runs (10,000 agents, 10,000
// connections), heartbeats on it and keeps one WatchInstances stream open,
// so what a connection pins stays pinned. With Go's defaults one agent's
// connection held about 36 KiB of the planner's heap (issue 27): a frame
// read buffer as large as the largest frame the connection ever carried
// (14 KiB, the registration's topology, sent in one frame because each
// stream could take 1 MiB), HPACK tables filled to 4 KiB by the gRPC
// headers that change on every call (grpc-timeout), and a 1 MiB receive
// window per connection that a slow handler lets fill.
const (
	// H2MaxReadFrameSize bounds the frames a client may send (the
	// protocol's least, 16 KiB; Go's default is 1 MiB): the largest
	// HEADERS frame, and so the frame read buffer, is this size.
	H2MaxReadFrameSize = 16 << 10
	// H2StreamWindow is each stream's receive window: the protocol's
	// initial 64 KiB - 1 (Go's default is 1 MiB). No less: a client may
	// send that much of a body before the server's SETTINGS reach it
	// (RFC 9113 6.9.2), and Go's HTTP/2 server resets a stream past the
	// window it announced, so a 4 KiB window reset the first request of
	// every new connection from Go's HTTP/2 client or curl with a body
	// over 4 KiB (FLOW_CONTROL_ERROR). A connection's frame read buffer
	// is still bounded by H2MaxReadFrameSize; the agents send their one
	// large request, the registration, gzip-compressed (1.1 KiB), and the
	// CLI and the agents speak HTTP/1.1.
	H2StreamWindow = 64<<10 - 1
	// H2ConnWindow is the connection's receive window (the protocol's
	// initial 64 KiB; Go's default is 1 MiB): what one connection's
	// streams together may have sent and the handlers not yet read.
	H2ConnWindow = 64 << 10
	// H2HeaderTable is the HPACK dynamic table size each way: the gRPC
	// headers that stay the same from call to call fit (about 400
	// bytes); those that change on every call (grpc-timeout) no longer
	// fill it to Go's default of 4 KiB.
	H2HeaderTable = 1 << 10
	// CompressMinBytes: messages shorter than this are sent as they are,
	// even to a client that accepts gzip (a heartbeat's answer, a watch
	// message); compressing each cost a gzip writer's reset (its 512 KiB
	// hash table cleared) for a few bytes saved, or none.
	CompressMinBytes = 4 << 10
	// H2MaxConcurrentStreams bounds the streams one connection has open
	// at once (Go's default is 250): RFC 9113 6.5.2 recommends no fewer
	// than 100; an agent holds two (a heartbeat and its watch), a
	// browser's web view a few. With --identity-max-conns, one identity
	// holds at most 64 × 100 calls in flight, and their request bodies
	// MaxBodyBytesPerIdentity.
	H2MaxConcurrentStreams = 100
)

// agentHTTP2 is the API server's HTTP/2 configuration (see the constants).
func agentHTTP2() *http.HTTP2Config {
	return &http.HTTP2Config{
		MaxConcurrentStreams:          H2MaxConcurrentStreams,
		MaxReadFrameSize:              H2MaxReadFrameSize,
		MaxReceiveBufferPerStream:     H2StreamWindow,
		MaxReceiveBufferPerConnection: H2ConnWindow,
		MaxDecoderHeaderTableSize:     H2HeaderTable,
		MaxEncoderHeaderTableSize:     H2HeaderTable,
	}
}

// compressLarge is the handler option that compresses only messages of
// CompressMinBytes and more.
func compressLarge() connect.HandlerOption { return connect.WithCompressMinBytes(CompressMinBytes) }

// AgentClientOptions are a node agent's client options: a request of
// CompressMinBytes or more goes gzip-compressed. The registration is the
// one such request (a 128-CPU host's topology: 13 KiB of JSON, 1.1 KiB
// compressed); it is an agent connection's first request, sent before the
// planner's settings reach the agent, so its frames are sized by the
// protocol's defaults, and the planner's frame read buffer for that
// connection stays as large as the largest (13 KiB) for as long as the
// agent runs. Every planner accepts gzip in unary Connect calls (the
// agent's protocol), where it holds what a body decompresses to in the
// caller's body budget (budgetBody); compressed gRPC or streamed messages
// are refused.
func AgentClientOptions() []connect.ClientOption {
	return []connect.ClientOption{connect.WithSendGzip(), connect.WithCompressMinBytes(CompressMinBytes)}
}
