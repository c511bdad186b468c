package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/coordkit/coordkit/lock"
)

// Local lines: the goroutines of one Client that Obtain the same key line
// up in process, first come first served, and only the one at the front
// talks to the masters. It keeps its place from its first attempt until its
// hold ends or is lost. The outermost release of a hold with someone in
// line hands the lock over to the next one's owner on every master in one
// script each (handOff): with a quorum of masters handed over and validity
// left, the next one holds the lock without an acquisition round of its
// own; otherwise everything the hand-off may have given it is released and
// it attempts as usual. Without someone in line, the release frees the
// lock and the place after a quorum answered. Without the line, every
// goroutine queued on every master and a release woke a different one on
// each, splitting the next round's votes. The line orders this client's
// goroutines only: the masters alone decide who holds the lock, and other
// clients' waiters queued on a master make the hand-off there a release
// that passes the lock to them. TryObtain does not line up, nor does
// re-entry (Obtain by an owner that holds the key through this client
// returns a level at once).

// lines are a Client's local lines, by key.
type lines struct {
	mu sync.Mutex // protects m, every line and every liner's taken, every place's left
	m  map[string]*line
}

// line is one key's line.
type line struct {
	busy  bool     // a goroutine is at the front
	queue []*liner // waiting, in arrival order
}

// liner is a goroutine waiting in a line.
type liner struct {
	owner string
	ttl   time.Duration
	turn  chan turn // buffered: the front is passed to it once
	taken bool      // off the queue: its turn is sent or about to be
}

// turn passes the front of a line on. With a set, the lock was handed over
// to the liner's owner by that attempt (its start times the lease);
// without, the liner attempts as usual.
type turn struct {
	a *attempt
}

// place is the front of a key's line, given up once (leave or next).
type place struct {
	ls   *lines
	key  string
	ln   *line
	left bool // protected by ls.mu
}

// enter waits for the front of key's line, for owner, who wants a hold of
// ttl. It returns the place and, if the lock was handed over to owner, the
// attempt that did it. If ctx ends (or quit closes) first it returns
// errors.Join(lock.ErrNotObtained, ctx.Err()) (or lock.ErrClosed); if the
// front was being passed to this call at that moment, it also returns the
// place and attempt, which the caller must give up (release what a is for,
// then leave).
func (ls *lines) enter(ctx context.Context, key string, quit <-chan struct{}, owner string, ttl time.Duration) (*place, *attempt, error) {
	ls.mu.Lock()
	if ls.m == nil {
		ls.m = map[string]*line{}
	}
	ln := ls.m[key]
	if ln == nil {
		ln = &line{}
		ls.m[key] = ln
	}
	if !ln.busy {
		ln.busy = true
		ls.mu.Unlock()
		return &place{ls: ls, key: key, ln: ln}, nil, nil
	}
	lr := &liner{owner: owner, ttl: ttl, turn: make(chan turn, 1)}
	ln.queue = append(ln.queue, lr)
	ls.mu.Unlock()
	var err error
	select {
	case t := <-lr.turn:
		return &place{ls: ls, key: key, ln: ln}, t.a, nil
	case <-ctx.Done():
		err = errors.Join(lock.ErrNotObtained, ctx.Err())
	case <-quit:
		err = lock.ErrClosed
	}
	ls.mu.Lock()
	if !lr.taken {
		ln.queue = slices.DeleteFunc(ln.queue, func(x *liner) bool { return x == lr })
		ls.mu.Unlock()
		return nil, nil, err
	}
	ls.mu.Unlock()
	t := <-lr.turn // sent once the hand-off round (bounded) is decided
	return &place{ls: ls, key: key, ln: ln}, t.a, err
}

// leave gives the front to the next in line, to attempt as usual, or frees
// the line. It is idempotent and safe on a nil place. It never blocks, so a
// watchdog's OnLost may call it.
func (p *place) leave() {
	if p == nil {
		return
	}
	ls, ln := p.ls, p.ln
	ls.mu.Lock()
	if p.left {
		ls.mu.Unlock()
		return
	}
	p.left = true
	if len(ln.queue) > 0 {
		lr := ln.pop()
		ls.mu.Unlock()
		lr.turn <- turn{}
		return
	}
	ln.busy = false
	if ls.m[p.key] == ln {
		delete(ls.m, p.key)
	}
	ls.mu.Unlock()
}

// next gives up the place to the next in line and returns it, or returns
// nil (keeping the place) when no one is in line or the place was left.
// The caller must send the liner its turn exactly once.
func (p *place) next() *liner {
	if p == nil {
		return nil
	}
	p.ls.mu.Lock()
	defer p.ls.mu.Unlock()
	if p.left || len(p.ln.queue) == 0 {
		return nil
	}
	p.left = true
	return p.ln.pop()
}

// pop takes the first liner off the queue; lines.mu must be held.
func (ln *line) pop() *liner {
	lr := ln.queue[0]
	ln.queue[0] = nil
	ln.queue = ln.queue[1:]
	lr.taken = true
	return lr
}
