package agentlink

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	for _, p := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("ab"), 5000)} {
		if err := WriteFrame(&buf, KindDesired, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int{0, 1, 10000} {
		k, b, err := ReadFrame(&buf, MaxAgentFrame)
		if err != nil || k != KindDesired || len(b) != want {
			t.Fatalf("ReadFrame = %s, %d bytes, %v; want %s, %d bytes", k, len(b), err, KindDesired, want)
		}
	}
	if _, _, err := ReadFrame(&buf, MaxAgentFrame); !errors.Is(err, io.EOF) {
		t.Errorf("after the last frame: %v, want EOF", err)
	}
}

// headerOnly fails any read past a frame's 4-byte length.
type headerOnly struct{ r io.Reader }

func (h *headerOnly) Read(p []byte) (int, error) {
	if h.r == nil {
		return 0, errors.New("read past the length")
	}
	n, err := h.r.Read(p)
	h.r = nil
	return n, err
}

func TestReadFrameRefuses(t *testing.T) {
	// Over the bound: refused from its length, its payload never read.
	_, _, err := ReadFrame(&headerOnly{r: bytes.NewReader([]byte{0, 1, 0, 0})}, MaxAgentFrame)
	if !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "frame of 65536 bytes: at most 16384") {
		t.Errorf("a 64 KiB frame at a 16 KiB bound: %v", err)
	}
	// Cut short: not a clean end.
	_, _, err = ReadFrame(bytes.NewReader([]byte{0, 0, 0, 9, 4, 1}), MaxAgentFrame)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a frame cut short: %v, want ErrUnexpectedEOF", err)
	}
	_, _, err = ReadFrame(bytes.NewReader([]byte{0, 0}), MaxAgentFrame)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a length cut short: %v, want ErrUnexpectedEOF", err)
	}
}

func TestErrorText(t *testing.T) {
	err := ParseError(ErrorText(connect.NewError(connect.CodeNotFound, errors.New(`host "h9" is not registered`))))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), `host "h9" is not registered`) {
		t.Errorf("round trip = %v (%s)", err, connect.CodeOf(err))
	}
	err = ParseError([]byte("no code here"))
	if connect.CodeOf(err) != connect.CodeUnknown || !strings.Contains(err.Error(), "no code here") {
		t.Errorf("text without a code = %v (%s), want unknown with the text", err, connect.CodeOf(err))
	}
}
