package agentlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"
)

const (
	// Path is the link's request path.
	Path = "/pinfold.link.v1/Link"
	// Protocol is the Upgrade header's token.
	Protocol = "pinfold-link.v1"
	// HostParam is the query parameter naming the agent's host.
	HostParam = "host"
	// MaxAgentFrame bounds a frame an agent sends (a heartbeat is a few
	// hundred bytes): the planner refuses a longer one before reading it.
	MaxAgentFrame = 16 << 10
	// MaxPlannerFrame bounds a frame the agent reads: a host's desired
	// set (the planner's own request bound is 4 MiB; a set of thousands of
	// instances stays well under this).
	MaxPlannerFrame = 64 << 20
)

// Kind is what a frame carries.
type Kind byte

// The kinds of frame (see the package documentation).
const (
	KindHeartbeat       Kind = 1
	KindHeartbeatAnswer Kind = 2
	KindHeartbeatError  Kind = 3
	KindDesired         Kind = 4
	KindError           Kind = 5
)

func (k Kind) String() string {
	switch k {
	case KindHeartbeat:
		return "heartbeat"
	case KindHeartbeatAnswer:
		return "heartbeat answer"
	case KindHeartbeatError:
		return "heartbeat error"
	case KindDesired:
		return "desired state"
	case KindError:
		return "error"
	}
	return fmt.Sprintf("kind %d", byte(k))
}

// WriteFrame writes one frame of kind k in one Write.
func WriteFrame(w io.Writer, k Kind, payload []byte) error {
	b := make([]byte, 5+len(payload))
	binary.BigEndian.PutUint32(b, uint32(1+len(payload)))
	b[4] = byte(k)
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// ErrFrameTooLarge is the error of a frame longer than its reader's bound.
var ErrFrameTooLarge = errors.New("frame too large")

// ReadFrame reads one frame of at most max bytes (kind and payload); a
// longer one is refused before its payload is read.
func ReadFrame(r io.Reader, max int) (Kind, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:4]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	switch {
	case n == 0:
		return 0, nil, errors.New("frame of length 0: want at least its kind byte")
	case n > uint32(max):
		return 0, nil, fmt.Errorf("frame of %d bytes: at most %d: %w", n, max, ErrFrameTooLarge)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return Kind(b[0]), b[1:], nil
}

// ErrorText is the payload of an error frame for err: its Connect code
// (Unknown for an error without one), a newline, its message.
func ErrorText(err error) []byte {
	code := connect.CodeOf(err)
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	return []byte(code.String() + "\n" + msg)
}

// ParseError is the error an error frame's payload describes, with its
// Connect code.
func ParseError(payload []byte) error {
	name, msg, _ := strings.Cut(string(payload), "\n")
	var code connect.Code
	if err := code.UnmarshalText([]byte(name)); err != nil {
		code = connect.CodeUnknown
		msg = string(payload)
	}
	return connect.NewError(code, errors.New(msg))
}
