package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// The zk backend's control node. Every zk client process watches one znode
// of its slot, zkControlRoot/s<i>, on the same connection as its zklock
// Client: an application's configuration node, such as services watch
// beside their locks. The nemesis (nemesis.go, zk-notify-partition) writes
// it directly, not through the slot's proxies, with one line:
//
//	<seq> hold <ns>   the next critical section to start works <ns> (a slow section)
//	<seq> ping        nothing to do; the write only sends the watch's notification
//	<seq> end         a slow section asked for ends now (the step is over)
//
// A notification counts as traffic from the server for go-zookeeper's
// liveness, but the server hears nothing from the client: that is what the
// nemesis step needs.
const zkControlRoot = "/chaos-ctl"

// zkControlPath is the control node of the slot of process proc ("s1.2").
func zkControlPath(proc string) string {
	slot, _, _ := strings.Cut(proc, ".")
	return zkControlRoot + "/" + slot
}

// zkControl is a zk client process's view of its control node. A nil
// *zkControl (the other backends) never asks for a slow section.
type zkControl struct {
	mu   sync.Mutex    // protects the fields below
	seen int64         // the last seq applied
	hold time.Duration // a slow section asked for and not yet started
	end  chan struct{} // closed by "end": the slow sections asked for so far end
}

// take returns the slow section asked for, once, and the channel that
// ends it early.
func (c *zkControl) take() (time.Duration, <-chan struct{}) {
	if c == nil {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.hold
	c.hold = 0
	return d, c.end
}

// apply applies one content of the control node.
func (c *zkControl) apply(data []byte) {
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return
	}
	seq, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq <= c.seen {
		return
	}
	c.seen = seq
	switch {
	case f[1] == "hold" && len(f) == 3:
		if ns, err := strconv.ParseInt(f[2], 10, 64); err == nil && ns > 0 {
			c.hold = time.Duration(ns)
			if c.end == nil {
				c.end = make(chan struct{})
			}
		}
	case f[1] == "end" && c.end != nil:
		c.hold = 0
		close(c.end)
		c.end = nil
	}
}

// watch keeps a data watch on path over conn (an exists watch while the
// node does not exist) until ctx ends, applying each content it reads.
func (c *zkControl) watch(ctx context.Context, conn *zk.Conn, path string) {
	for ctx.Err() == nil {
		data, _, ch, err := conn.GetW(path)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, ch, err = conn.ExistsW(path)
			if err == nil && ok {
				continue // created meanwhile: read it
			}
		}
		if err != nil {
			sleepCtx(ctx, 50*time.Millisecond)
			continue
		}
		c.apply(data)
		select {
		case <-ctx.Done():
		case <-ch:
		}
	}
}

// work is a critical section's work: a slow section if the nemesis asked
// for one (it ends early when ctx does, as a holder's work should once its
// lease is lost, or when the nemesis says so), or a random time up to
// cfg.hold.
func (w *worker) work(ctx context.Context, a *attempt) {
	if w.longFor > 0 { // a long key's worker (longLoop)
		w.sleep(ctx, a, w.longFor)
		return
	}
	if d, end := w.ctl.take(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-end:
		case <-t.C:
		}
		return
	}
	// A long section (-long; never drawn when it is 0, so that the
	// profiles' schedules stay as they were): it outlives the report bound
	// unless the lease's loss ends it, so a holder never told of a loss
	// overlaps the next holder by more than the checker excuses.
	if w.cfg.long > 0 && w.rnd.Float64() < w.cfg.long {
		w.sleep(ctx, a, w.cfg.longFor)
		return
	}
	time.Sleep(time.Duration(w.rnd.Int64N(int64(w.cfg.hold) + 1)))
}

// setZKControl writes the control node of proc's slot over conn (a
// connection of the nemesis's own), creating it and its parent if needed.
func setZKControl(conn *zk.Conn, proc string, seq int64, cmd string) error {
	data := []byte(fmt.Sprintf("%d %s", seq, cmd))
	path := zkControlPath(proc)
	_, err := conn.Set(path, data, -1)
	if !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	if _, err := conn.Create(zkControlRoot, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	if _, err = conn.Create(path, data, 0, zk.WorldACL(zk.PermAll)); errors.Is(err, zk.ErrNodeExists) {
		_, err = conn.Set(path, data, -1)
	}
	return err
}
