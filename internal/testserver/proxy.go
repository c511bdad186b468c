package testserver

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP fault proxy on 127.0.0.1 in front of one server. By default
// it passes bytes through unchanged; its setters inject faults that apply at
// once, to new and existing connections alike. Its methods are safe for
// concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // every accept, pipe and pump goroutine

	mu        sync.Mutex // protects the fields below
	cond      *sync.Cond // signalled when blackhole or closed change
	latency   time.Duration
	dropNew   bool
	blackhole bool
	holdUp    bool // bytes to the server are held (SetBlackholeToServer)
	holdDown  bool // bytes to the client are held (SetBlackholeToClient)
	closed    bool
	conns     map[*proxyConn]struct{}
	label     func(first []byte) string // names a connection's source (SetLabeler)
	isolated  map[string]bool           // sources whose connections are held (SetIsolated)
}

type proxyConn struct {
	client, server net.Conn
	src            string // its source, named by the labeler from its first bytes; protected by Proxy.mu
}

func (c *proxyConn) close() {
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// NewProxy listens on a free loopback port and forwards to target. The
// caller must Close it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}, isolated: map[string]bool{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// StartProxy is NewProxy for tests.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := NewProxy(target)
	return must(tb, p, err)
}

// Addr is the address clients should dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLatency delays every chunk of bytes, in both directions, by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetDropNew makes the proxy close new connections as soon as they are
// accepted (as a server whose port is closed would, after the handshake).
func (p *Proxy) SetDropNew(drop bool) {
	p.mu.Lock()
	p.dropNew = drop
	p.mu.Unlock()
}

// SetBlackhole holds every byte in both directions, on existing and new
// connections, until it is turned off again (or the connection is cut): the
// peer sees an open connection that never answers.
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// SetBlackholeToServer holds every byte on its way to the server, on
// existing and new connections, until it is turned off again (or the
// connection is cut), and lets the server's bytes through: a half-open
// link, where the server hears nothing while the client still receives
// (replies already sent, watch notifications, and writes of its own that
// succeed).
func (p *Proxy) SetBlackholeToServer(on bool) {
	p.mu.Lock()
	p.holdUp = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// SetBlackholeToClient is SetBlackholeToServer for the other direction:
// the server still receives, the client hears nothing.
func (p *Proxy) SetBlackholeToClient(on bool) {
	p.mu.Lock()
	p.holdDown = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// SetLabeler makes the proxy name each new connection's source from the
// first bytes it carries to the server (label returns "" when it cannot
// tell), for SetIsolated: a server's peers all dial the same address, and
// only what they send says who they are (etcd's peers send their own peer
// URLs in a header).
func (p *Proxy) SetLabeler(label func(first []byte) string) {
	p.mu.Lock()
	p.label = label
	p.mu.Unlock()
}

// SetIsolated holds every byte in both directions of the connections whose
// source (SetLabeler) is src, existing and new ones, until it is turned off
// again (or the connection is cut).
func (p *Proxy) SetIsolated(src string, on bool) {
	p.mu.Lock()
	if on {
		p.isolated[src] = true
	} else {
		delete(p.isolated, src)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Cut closes every existing connection (both sides); new ones are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[*proxyConn]struct{}{}
	p.cond.Broadcast()
	p.mu.Unlock()
	for c := range conns {
		c.close()
	}
}

// Reset clears every fault: no latency, new connections accepted, no black
// hole in either direction.
func (p *Proxy) Reset() {
	p.mu.Lock()
	p.latency, p.dropNew, p.blackhole = 0, false, false
	p.holdUp, p.holdDown = false, false
	p.isolated = map[string]bool{}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Conns returns the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, cuts every connection and waits for every goroutine
// of the proxy to end. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		p.mu.Lock()
		drop, closed := p.dropNew, p.closed
		pc := &proxyConn{client: c}
		if !drop && !closed {
			p.conns[pc] = struct{}{}
		}
		p.mu.Unlock()
		if drop || closed {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.dial(pc)
	}
}

func (p *Proxy) dial(pc *proxyConn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	p.mu.Lock()
	_, live := p.conns[pc]
	if err == nil && live {
		pc.server = s
	}
	p.mu.Unlock()
	if err != nil || !live {
		if s != nil {
			s.Close()
		}
		p.drop(pc)
		return
	}
	p.wg.Add(2)
	go p.pipe(pc, pc.client, s, true)
	go p.pipe(pc, s, pc.client, false)
}

func (p *Proxy) drop(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	pc.close()
}

type chunk struct {
	b  []byte
	at time.Time // when it may be delivered
}

// pipe copies src to dst: a reader stamps each chunk with its delivery time
// and a writer delivers it then, so latency does not cut throughput; the
// writer holds chunks while the proxy is black-holed (in dst's direction:
// toServer tells which it is).
func (p *Proxy) pipe(pc *proxyConn, src, dst net.Conn, toServer bool) {
	defer p.wg.Done()
	defer p.drop(pc)
	q := make(chan chunk, 64)
	p.wg.Add(1)
	go func() { // the reader; it ends when src is closed or fails
		defer p.wg.Done()
		defer close(q)
		first := toServer
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				lat := p.latency
				if first && p.label != nil {
					pc.src = p.label(buf[:n])
				}
				p.mu.Unlock()
				first = false
				q <- chunk{buf[:n], time.Now().Add(lat)}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		// Unblock the reader: closing both ends makes its Read fail; then
		// drain what it may still be sending.
		pc.close()
		for range q {
		}
	}()
	for c := range q {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		if !p.waitOpen(pc, toServer) {
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}

// waitOpen blocks while the proxy is black-holed in the direction toServer
// says; it reports false once the connection was cut or the proxy closed.
func (p *Proxy) waitOpen(pc *proxyConn, toServer bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if _, live := p.conns[pc]; !live || p.closed {
			return false
		}
		held := p.blackhole || (toServer && p.holdUp) || (!toServer && p.holdDown) || pc.src != "" && p.isolated[pc.src]
		if !held {
			return true
		}
		p.cond.Wait()
	}
}
