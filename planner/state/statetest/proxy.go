package statetest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections on a loopback port to a target address
// and can stall all their traffic as a stopped process does (Freeze): new
// connections are still accepted (the kernel's backlog), bytes already
// sent wait, nothing is answered, and a connection closed meanwhile is
// seen closed only after Thaw.
type Proxy struct {
	l      net.Listener
	target string

	mu     sync.Mutex
	frozen bool
	thaw   chan struct{} // closed at Thaw (and Close)
	conns  map[net.Conn]struct{}
	closed bool
}

// NewProxy listens on a free loopback port and forwards to target until
// cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, target: target, thaw: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Freeze stalls every connection, open or new, until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen, p.thaw = true, make(chan struct{})
	}
}

// Thaw lets the stalled traffic through.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.l.Close()
}

// gate waits while the proxy is frozen.
func (p *Proxy) gate() {
	p.mu.Lock()
	frozen, thaw := p.frozen, p.thaw
	p.mu.Unlock()
	if frozen {
		<-thaw
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		go func() {
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				p.gate() // a stopped process's refusal is not seen either
				in.Close()
				return
			}
			if !p.track(in, out) {
				in.Close()
				out.Close()
				return
			}
			go p.pipe(out, in)
			p.pipe(in, out)
		}()
	}
}

// pipe copies src to dst, each read held while frozen, and closes both at
// the end.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.gate()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
