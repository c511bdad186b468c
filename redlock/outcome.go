package redlock

import (
	"context"
	"fmt"
	"sync"
)

// errNoAnswer is a NodeError's Err for a master that had not answered when
// its round stopped waiting (the node timeout, or the slow bound, passed,
// or the caller's ctx ended). Its call may still run there; it matches
// context.DeadlineExceeded.
var errNoAnswer = fmt.Errorf("no answer in time: %w", context.DeadlineExceeded)

// outcome is a round's result as the answers that come after its decision
// need it (fanOut's late): whether the round failed, so that what such an
// answer took on its master is given back. The zero value is a round not
// decided yet.
type outcome struct {
	mu      sync.Mutex
	known   bool
	failed  bool
	pending []func() // undos of late answers that came before the result was known
}

// ifFailed runs undo if the round failed: now, if that is known, or when
// set learns it. Called by a late answer (on a goroutine the Client owns).
func (o *outcome) ifFailed(undo func()) {
	o.mu.Lock()
	if !o.known {
		o.pending = append(o.pending, undo)
		o.mu.Unlock()
		return
	}
	failed := o.failed
	o.mu.Unlock()
	if failed {
		undo()
	}
}

// set records the round's result; if it failed, the undos that waited for
// it run in the background, owned by c.
func (o *outcome) set(c *Client, failed bool) {
	o.mu.Lock()
	o.known, o.failed = true, failed
	p := o.pending
	o.pending = nil
	o.mu.Unlock()
	if failed {
		for _, undo := range p {
			c.background(undo)
		}
	}
}

// background runs f on a goroutine that Close waits for, or at once on
// this one if the Client is closed.
func (c *Client) background(f func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		f()
		return
	}
	c.bg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.bg.Done()
		f()
	}()
}
