package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/lock"
)

// handOff is the outermost release of hold h when lr is next in the key's
// local line: handoff.lua on every master in parallel, each bounded by the
// node timeout, releases h's owner and makes lr's owner the holder in one
// step. It is lr's acquisition round: with a quorum of masters handed over
// and validity left (lr's TTL − elapsed − drift, from the round's start),
// and the fencing counters raised where needed, lr's turn carries the
// attempt and lr holds the lock without a round of its own. Otherwise
// everything the round may have given lr's owner is released first (the
// masters that handed over, and those whose answer was lost), and lr's
// turn tells it to attempt as usual. A master where another client's
// waiter is queued releases instead and passes the lock to that waiter.
//
// It returns Release's result for h: nil if a quorum of masters held h.
func (c *Client) handOff(ctx context.Context, h *hold, lr *liner) error {
	key, owner := h.k.key, h.k.owner
	n := len(c.masters)
	start := c.o.now()
	// The new level's id and the release's request id are the same on
	// every master: a master that runs the hand-off twice (go-redis resent
	// it) answers as the first time. One clock reading is every master's
	// token floor, so that their tokens agree.
	req := hashlock.NodeHandoff{Owner: owner, NewOwner: lr.owner, TTL: lr.ttl, Level: h.level,
		NewLevel: c.node.WaiterID(c.id, c.nextSeq()), Request: c.node.WaiterID(c.id, c.nextSeq()),
		Window: c.o.releaseWindow, Floor: start.UnixMicro(), NewMeta: c.o.meta}
	// A quorum decides a success at once; a failure is decided when every
	// master answered or the node timeout passed. A master where h's owner
	// holds more levels (the same owner through another client) hands
	// nothing over: one level is released there instead (below, or in
	// late for an answer after the decision). A late answer of a failed
	// round that handed over (or may have: an error) is undone there, as
	// the failure's releases may have overtaken it.
	fate := new(outcome)
	notHeld := false // a master answered that h's owner did not hold the lock (set before fate)
	rs := fanOut(c, ctx, c.o.nodeTimeout, nil, func(out []reply[hashlock.NodeHandoffResult]) bool {
		got := 0
		for _, r := range out {
			if r.done && r.err == nil && r.v.Outcome == hashlock.HandedOver {
				got++
			}
		}
		return got >= c.quorum
	}, func(i int, v hashlock.NodeHandoffResult, err error) {
		switch {
		case err == nil && v.Outcome == hashlock.HandoffReentered:
			c.releaseOne(ctx, i, key, owner, h.level, h.ttl)
		case err != nil || v.Outcome == hashlock.HandedOver:
			fate.ifFailed(func() {
				one := make([]reply[hashlock.NodeHandoffResult], n)
				for j := range one {
					one[j] = reply[hashlock.NodeHandoffResult]{i: j, done: true} // nothing to undo
				}
				one[i] = reply[hashlock.NodeHandoffResult]{i: i, v: v, err: err, done: true}
				c.undoHandOff(ctx, key, one, notHeld, lr, req.NewLevel, h)
			})
		}
	}, func(ctx context.Context, i int, done func(hashlock.NodeHandoffResult, error)) {
		c.node.HandoffGo(ctx, c.async(i), key, req, done)
	})
	for _, r := range rs {
		if r.done && r.err == nil && r.v.Outcome == hashlock.HandoffReentered {
			c.releaseOne(ctx, r.i, key, owner, h.level, h.ttl)
		}
	}

	// missed: masters where lr's owner does not hold the lock after the round
	// (answered otherwise), for giving it back if lr's ctx has ended.
	a := attempt{start: start, minWait: c.o.waiterTimeout, missed: make([]bool, n), level: req.NewLevel}
	held := 0                                    // masters where h's owner held the lock
	notHeldN := 0                                // masters that answered h's owner did not hold it
	acq := make([]reply[hashlock.NodeResult], n) // the round as acquisitions, for raiseFence
	var errs []error
	for _, r := range rs {
		acq[r.i] = reply[hashlock.NodeResult]{i: r.i, err: r.err, done: r.done}
		a.missed[r.i] = r.done && (r.err != nil || r.v.Outcome != hashlock.HandedOver)
		switch {
		case !r.done: // not awaited (the round succeeded without it), or no answer in time
			errs = append(errs, &NodeError{Node: r.i, Addr: c.addrs[r.i], Op: "handoff", Err: errNoAnswer})
		case r.err != nil:
			a.failed++
			errs = append(errs, nodeErr(r.err, "handoff"))
		case r.v.Outcome == hashlock.HandedOver:
			held++
			a.got++
			a.fresh++
			a.token = max(a.token, r.v.Token)
			acq[r.i].v = hashlock.NodeResult{Held: true, Fresh: true, Token: r.v.Token}
		case r.v.Outcome == hashlock.HandoffReleased:
			held++
			a.elsewhere++
			errs = append(errs, &NodeError{Node: r.i, Addr: c.addrs[r.i], Op: "handoff", Err: errPassed})
		case r.v.Outcome == hashlock.HandoffReentered:
			held++
			a.failed++
			errs = append(errs, &NodeError{Node: r.i, Addr: c.addrs[r.i], Op: "handoff", Err: errReentered})
		default:
			notHeld = true
			notHeldN++
			errs = append(errs, &NodeError{Node: r.i, Addr: c.addrs[r.i], Op: "release", Err: lock.ErrNotHeld})
		}
	}
	validity := func() bool { return lr.ttl-c.o.now().Sub(start)-Drift(lr.ttl) > 0 }
	a.ok = a.got >= c.quorum && validity() && c.raiseFence(ctx, key, lr.owner, acq, a.token) == nil && validity()
	defer fate.set(c, !a.ok) // after undoHandOff: a late answer's undo follows the round's
	if a.ok {
		lr.turn <- turn{a: &a}
	} else {
		held += c.undoHandOff(ctx, key, rs, notHeld, lr, req.NewLevel, h)
		lr.turn <- turn{}
	}
	return releaseResult(c, key, held, notHeldN, errs)
}

// undoHandOff runs the releases of a failed hand-off round rs, before the
// liner's turn (a release still on its way when it attempts could drop
// that attempt's level instead): lr's owner is released where the round
// handed over, or may have (a lost answer, unless some master answered
// that h's owner did not hold the lock: lr's owner may then hold a level
// of its own there, through another client); h's owner where its answer
// was lost or had not come (not done: the round stopped waiting for it).
// It returns on how many such masters h's owner turned out to hold the
// lock.
func (c *Client) undoHandOff(ctx context.Context, key string, rs []reply[hashlock.NodeHandoffResult], notHeld bool,
	lr *liner, newLevel string, h *hold) int {
	lost := func(i int) bool { return !rs[i].done || rs[i].err != nil }
	newOwner := func(i int) bool {
		return rs[i].done && rs[i].err == nil && rs[i].v.Outcome == hashlock.HandedOver || lost(i) && !notHeld
	}
	oldOwner := lost
	reqNew, reqOld := c.node.WaiterID(c.id, c.nextSeq()), c.node.WaiterID(c.id, c.nextSeq())
	out := fanOut(c, context.WithoutCancel(ctx), c.o.slowTimeout(),
		func(i int) bool { return newOwner(i) || oldOwner(i) }, nil, nil,
		blocking(c, func(ctx context.Context, i int, _ redis.UniversalClient) (bool, error) {
			// h's owner first: where the hand-off ran (its answer came
			// late), the new hold's PREV field names h's level, and
			// release.lua answers that level "released" only while that
			// hold is there. Released second, the new owner's level took
			// that evidence with it: Release answered "not confirmed"
			// for a hold every master had and released
			// (TestHandOffLateAnswersRelease, with the scripts loaded).
			var held bool
			var errOld error
			if oldOwner(i) {
				var left int64
				left, errOld = c.node.Release(ctx, c.server(i), key, hashlock.NodeRelease{
					Owner: h.k.owner, Request: reqOld, Window: c.o.releaseWindow, Level: h.level,
				})
				held = errOld == nil && left >= 0
			}
			var errNew error
			if newOwner(i) {
				_, errNew = c.node.Release(ctx, c.server(i), key, hashlock.NodeRelease{
					Owner: lr.owner, Request: reqNew, Window: c.o.releaseWindow, Level: newLevel,
				})
			}
			return held, errors.Join(errOld, errNew)
		}))
	more := 0
	for _, r := range out {
		if r.done && r.v {
			more++
		}
	}
	return more
}

// releaseOne drops one level of owner's hold on master i, bounded by the
// slow bound, on a ctx detached from ctx's cancellation. A failure leaves
// the level to expire.
func (c *Client) releaseOne(ctx context.Context, i int, key, owner, level string, ttl time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.slowTimeout())
	defer cancel()
	_, _ = c.node.Release(rctx, c.server(i), key, hashlock.NodeRelease{
		Owner: owner, Request: c.node.WaiterID(c.id, c.nextSeq()), Window: c.o.releaseWindow, Level: level,
	})
}
