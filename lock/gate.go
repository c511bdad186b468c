package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/coordkit/coordkit/internal/redisfn"
)

// Local lines (non-fair mode): the goroutines of one Client that wait for
// the same key line up in process, first come first served, and only the
// one at the front talks to Redis. It keeps its place from its first
// attempt until its hold ends (outermost release) or is lost. The goroutines
// behind it send nothing. When the front's hold ends and the next in line
// may take a hand-off, the release is handoff.lua: one round trip that gives
// the lock to the next in line's owner (a fresh acquisition with its own
// fencing token), which then returns from Obtain without a round trip of
// its own. If another client's waiter is queued in Redis, handoff.lua
// releases instead and wakes it, so other clients are not starved. Redis
// alone decides who holds the lock: the line orders this client's
// goroutines and never lets two of them hold it.
//
// Fair mode does not use lines (its order is the queue in Redis), nor does
// TryObtain (one attempt, no wait), nor re-entry by an owner that holds the
// key through this client. If the answer to a hand-off is lost, the next
// in line's first attempt finds its level in the lock (the hand-off wrote
// it under the liner's call id) and takes the lock.

// gate is one key's line.
type gate struct {
	held bool     // some goroutine or hold is at the front
	line []*liner // waiting behind the front, in arrival order
}

// liner is one goroutine waiting in line.
type liner struct {
	ready chan grant // receives the front (and maybe a lease); buffered
	take  *takeover  // what a hand-off needs
}

// takeover describes the acquisition a hand-off makes for a liner.
type takeover struct {
	owner, id string
	o         obtainOptions
}

// grant gives a liner the front, with the lease of a hand-off or without.
// Without one, the liner attempts; if a hand-off to it happened whose
// answer was lost, that attempt finds its level in Redis and holds.
type grant struct {
	lease *lease
	// unsure: a hand-off to the liner's owner was sent and its answer lost.
	// A liner that no longer attempts (its ctx ended) must drop the level
	// the hand-off may have given it.
	unsure bool
}

// gates are a Client's local lines, by key.
type gates struct {
	mu sync.Mutex // protects m and every gate in it
	m  map[string]*gate
}

// enter lines up for key. It returns once at the front, with the lease of
// a hand-off if one came (the caller then holds key), else with the front
// only: the caller attempts and, on failure, passes the front on with
// pass. If ctx ends or quit closes while waiting, it returns
// errors.Join(ErrNotObtained, ctx.Err()) or ErrClosed and holds nothing.
func (gs *gates) enter(ctx context.Context, key string, quit <-chan struct{}, take *takeover) (*gate, grant, error) {
	gs.mu.Lock()
	if gs.m == nil {
		gs.m = map[string]*gate{}
	}
	g := gs.m[key]
	if g == nil {
		g = &gate{}
		gs.m[key] = g
	}
	if !g.held {
		g.held = true
		gs.mu.Unlock()
		return g, grant{}, nil
	}
	ln := &liner{ready: make(chan grant, 1), take: take}
	g.line = append(g.line, ln)
	gs.mu.Unlock()
	var err error
	select {
	case gr := <-ln.ready:
		return g, gr, nil
	case <-ctx.Done():
		err = errors.Join(ErrNotObtained, ctx.Err())
	case <-quit:
		err = ErrClosed
	}
	gs.mu.Lock()
	if i := slices.Index(g.line, ln); i >= 0 { // still in line: step out
		g.line = slices.Delete(g.line, i, i+1)
		gs.mu.Unlock()
		return nil, grant{}, err
	}
	gs.mu.Unlock()
	// Popped meanwhile: the front (or a hand-off) is on its way.
	gr := <-ln.ready
	if gr.lease != nil {
		return g, gr, nil // the lock is held: report it rather than lose it
	}
	if gr.unsure {
		return g, gr, err // the caller undoes the hand-off, then passes the front on
	}
	gs.pass(key, g)
	return nil, grant{}, err
}

// pass gives the front of key's line to the next in line, or frees it.
func (gs *gates) pass(key string, g *gate) {
	gs.mu.Lock()
	if len(g.line) == 0 {
		g.held = false
		if gs.m[key] == g {
			delete(gs.m, key)
		}
		gs.mu.Unlock()
		return
	}
	ln := g.line[0]
	g.line = slices.Delete(g.line, 0, 1)
	gs.mu.Unlock()
	ln.ready <- grant{}
}

// next takes the next in line out of it, if any.
func (gs *gates) next(g *gate) *liner {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if len(g.line) == 0 {
		return nil
	}
	ln := g.line[0]
	g.line = slices.Delete(g.line, 0, 1)
	return ln
}

// putBack returns ln to the head of the line (a hand-off that did not
// happen while the front stays where it is).
func (gs *gates) putBack(g *gate, ln *liner) {
	gs.mu.Lock()
	g.line = slices.Insert(g.line, 0, ln)
	gs.mu.Unlock()
}

// gateHold is the front place a hold keeps. It is given up once: passed on
// when the hold ends or is lost, or handed over with the lock.
type gateHold struct {
	gs   *gates
	key  string
	g    *gate
	once sync.Once
	gone atomic.Bool // the front was passed on or handed over
}

// leave passes the front on, unless it was passed on or handed over already.
func (p *gateHold) leave() {
	if p == nil {
		return
	}
	p.once.Do(func() { p.gone.Store(true); p.gs.pass(p.key, p.g) })
}

// claim marks the front as handed over with the lock (or to a liner that
// must find out whether it holds it), so that leave does not pass it again.
func (p *gateHold) claim() {
	p.once.Do(func() { p.gone.Store(true) })
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

// handoff tries to end l's hold by handing the lock to the next in l's
// line. done reports whether it ended the release (err is then Release's
// answer); if not, Release goes on as a plain release.
func (l *lease) handoff(ctx context.Context) (done bool, err error) {
	c := l.c
	if c.o.fair || c.o.replicas > 0 || l.h.gate == nil {
		return false, nil
	}
	c.mu.Lock()
	last := l.h.levels == 1 && !l.released
	c.mu.Unlock()
	if !last {
		return false, nil
	}
	gh := l.h.gate
	if gh.gone.Load() { // passed on already: after a lost hold, or a failed release
		return false, nil
	}
	ln := gh.gs.next(gh.g)
	if ln == nil {
		return false, nil
	}
	keys := c.keys(l.key)
	t := ln.take
	sent := c.o.now()
	res, err := c.run.Run(ctx, c.pipe, redisfn.Handoff, []string{keys[0], keys[1], keys[2], keys[3], keys[4], l.keys[3]},
		l.owner, t.owner, t.o.TTL.Milliseconds(), c.argChan, l.id, t.id, "", c.argWindow, c.o.meta).Int64Slice()
	switch {
	case err != nil:
		// Unknown: the lock may now be the liner's owner's. The liner takes
		// the front and finds out; this lease stays unreleased, and a
		// retried Release answers nil if the hand-off (or its release)
		// happened, from the marker handoff.lua leaves.
		gh.claim()
		ln.ready <- grant{unsure: true}
		return true, fmt.Errorf("lock: release %q: %w", l.key, err)
	case len(res) == 1 && res[0] == -2: // another level appeared: plain release
		gh.gs.putBack(gh.g, ln)
		return false, nil
	case len(res) == 2 && res[0] == 1: // handed over, with the front
		gh.claim()
		l.end() // first: a liner of the same owner starts a new hold
		nl := c.newLease(l.key, keys, t.owner, t.id, res[1], t.o, sent, &gateHold{gs: gh.gs, key: l.key, g: gh.g})
		ln.ready <- grant{lease: nl}
		return true, nil
	case len(res) == 1 && (res[0] == 0 || res[0] == -1): // released, or not held
		gh.claim()
		l.end()
		ln.ready <- grant{} // the front, to attempt as usual
		if res[0] == -1 {
			return true, ErrNotHeld
		}
		return true, nil
	}
	gh.claim()
	ln.ready <- grant{unsure: true}
	return true, fmt.Errorf("lock: release %q: unexpected reply %v", l.key, res)
}
