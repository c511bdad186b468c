package testserver

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ReplyLoser is a go-redis Dialer (its Dial method) whose connections lose
// the reply to the next command that carries an armed string (a script's
// SHA, say): the command reaches the server and runs, then, once the server
// had time to answer, the connection is cut before the reply is read.
// go-redis with its default options (MaxRetries 3) then sends the command
// again on a new connection, so it runs twice, as after a real lost reply;
// with MaxRetries: -1 the caller gets the network error. Safe for
// concurrent use; the zero value is ready.
type ReplyLoser struct {
	// Delay is how long a lost reply's read waits before the connection is
	// cut (the server runs the command meanwhile). Default: 30 ms.
	Delay time.Duration

	mu    sync.Mutex
	armed [][]byte // protects: the strings whose next command's reply is lost, once each
	lost  atomic.Int32
}

// Arm makes the next command whose bytes contain s lose its reply (once).
func (r *ReplyLoser) Arm(s string) {
	r.mu.Lock()
	r.armed = append(r.armed, []byte(s))
	r.mu.Unlock()
}

// Lost returns how many replies were lost so far.
func (r *ReplyLoser) Lost() int { return int(r.lost.Load()) }

// take reports whether b carries an armed string, and disarms it.
func (r *ReplyLoser) take(b []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, s := range r.armed {
		if bytes.Contains(b, s) {
			r.armed = append(r.armed[:i], r.armed[i+1:]...)
			return true
		}
	}
	return false
}

// Dial is a go-redis Options.Dialer.
func (r *ReplyLoser) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &loserConn{Conn: c, r: r}, nil
}

type loserConn struct {
	net.Conn
	r   *ReplyLoser
	cut atomic.Bool
}

func (c *loserConn) Write(b []byte) (int, error) {
	if c.r.take(b) {
		c.cut.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *loserConn) Read(b []byte) (int, error) {
	if c.cut.Load() {
		d := c.r.Delay
		if d <= 0 {
			d = 30 * time.Millisecond
		}
		time.Sleep(d) // the server runs the command and answers
		c.Conn.Close()
		c.r.lost.Add(1)
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}
