package redlock

import (
	"context"
	"errors"
	"sync"

	"github.com/coordkit/coordkit/lock"
)

// Local lines: the goroutines of one Client that Obtain the same key line
// up in process, first come first served, and only the one at the front
// talks to the masters. It keeps its place from its first attempt until its
// hold ends (outermost release, after a quorum answered) or is lost; then
// the next in line attempts, and finds the lock free on the masters it was
// released on. Without the line, every goroutine queued on every master and
// a release woke a different one on each, splitting the next round's votes.
// The line orders this client's goroutines only: the masters alone decide
// who holds the lock, and other clients' waiters compete as before.
// TryObtain does not line up, nor does re-entry (Obtain by an owner that
// holds the key through this client returns a level at once).

// lines are a Client's local lines, by key.
type lines struct {
	mu sync.Mutex // protects m and every line's users
	m  map[string]*line
}

// line is one key's line: the slot in turn is a send on a channel of one,
// whose blocked senders the runtime serves in arrival order.
type line struct {
	slot  chan struct{}
	users int // goroutines waiting or at the front
}

// place is the front of a key's line, given up once.
type place struct {
	ls   *lines
	key  string
	ln   *line
	once sync.Once
}

// enter waits for the front of key's line. It returns
// errors.Join(lock.ErrNotObtained, ctx.Err()) if ctx ends first, and
// lock.ErrClosed if quit closes.
func (ls *lines) enter(ctx context.Context, key string, quit <-chan struct{}) (*place, error) {
	ls.mu.Lock()
	if ls.m == nil {
		ls.m = map[string]*line{}
	}
	ln := ls.m[key]
	if ln == nil {
		ln = &line{slot: make(chan struct{}, 1)}
		ls.m[key] = ln
	}
	ln.users++
	ls.mu.Unlock()
	var err error
	select {
	case ln.slot <- struct{}{}:
		return &place{ls: ls, key: key, ln: ln}, nil
	case <-ctx.Done():
		err = errors.Join(lock.ErrNotObtained, ctx.Err())
	case <-quit:
		err = lock.ErrClosed
	}
	ls.done(key, ln)
	return nil, err
}

// done drops one user of key's line, and the line with its last user.
func (ls *lines) done(key string, ln *line) {
	ls.mu.Lock()
	ln.users--
	if ln.users == 0 && ls.m[key] == ln {
		delete(ls.m, key)
	}
	ls.mu.Unlock()
}

// leave gives the front to the next in line (or frees the line). It is
// idempotent and safe on a nil place. It never blocks, so a watchdog's
// OnLost may call it.
func (p *place) leave() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		<-p.ln.slot
		p.ls.done(p.key, p.ln)
	})
}
