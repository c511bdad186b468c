package lock

import (
	"context"
	"errors"
	"sync"
)

// Local gates (non-fair mode): the goroutines of one Client that wait for
// the same key line up in process, first come first served, and only the
// one at the front talks to Redis. It keeps its place from its first
// attempt until its hold ends (outermost release) or is lost. A release
// hands the key to the next local goroutine without a Pub/Sub message, and
// the goroutines behind it send nothing at all: in a hot key contended
// within one process each critical section costs one acquisition and one
// release. Other clients are not affected; Redis still decides who holds
// the lock, so mutual exclusion does not depend on the gate.
//
// Fair mode does not use gates (its order is the queue in Redis), nor does
// TryObtain (one attempt, no wait), nor re-entry by an owner that holds the
// key through this client.

// gate is one key's line: a token channel (holding the token is being at
// the front); the runtime serves blocked senders in arrival order.
type gate struct {
	ch   chan struct{}
	refs int // goroutines in line or at the front; protected by gates.mu
}

// gates are a Client's local gates, by key.
type gates struct {
	mu sync.Mutex // protects m and every gate's refs
	m  map[string]*gate
}

// enter lines up for key and returns once at the front: the caller must
// call leave(key, g, true). If ctx ends or quit closes first, it returns
// errors.Join(ErrNotObtained, ctx.Err()) or ErrClosed.
func (gs *gates) enter(ctx context.Context, key string, quit <-chan struct{}) (*gate, error) {
	gs.mu.Lock()
	if gs.m == nil {
		gs.m = map[string]*gate{}
	}
	g := gs.m[key]
	if g == nil {
		g = &gate{ch: make(chan struct{}, 1)}
		gs.m[key] = g
	}
	g.refs++
	gs.mu.Unlock()
	select {
	case g.ch <- struct{}{}:
		return g, nil
	case <-ctx.Done():
		gs.leave(key, g, false)
		return nil, errors.Join(ErrNotObtained, ctx.Err())
	case <-quit:
		gs.leave(key, g, false)
		return nil, ErrClosed
	}
}

// leave steps out of key's line; front says the caller holds the token,
// which passes to the next in line.
func (gs *gates) leave(key string, g *gate, front bool) {
	if front {
		<-g.ch
	}
	gs.mu.Lock()
	g.refs--
	if g.refs == 0 && gs.m[key] == g {
		delete(gs.m, key)
	}
	gs.mu.Unlock()
}

// gateHold is the front place a hold keeps: it is given up once, when the
// hold ends or is lost, whichever comes first.
type gateHold struct {
	gs   *gates
	key  string
	g    *gate
	once sync.Once
}

func (p *gateHold) leave() {
	if p == nil {
		return
	}
	p.once.Do(func() { p.gs.leave(p.key, p.g, true) })
}

// useGate says whether a call waits in its key's local line: Obtain (not
// TryObtain) in non-fair mode, unless ctx's owner holds key through this
// client already (re-entry must not wait behind itself).
func (c *Client) useGate(ctx context.Context, key string, wait bool) bool {
	if !wait || c.o.fair {
		return false
	}
	owner, ok := OwnerFrom(ctx)
	if !ok {
		return true
	}
	c.mu.Lock()
	h := c.holds[holdKey{key, owner}]
	c.mu.Unlock()
	return h == nil
}
