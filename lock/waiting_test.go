package lock_test

import (
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/lock"
)

// TestQueuedBehindExpiredHoldPassedOn: a release reads the queue only when
// the hash says a waiter may be queued (WAITING). A waiter that was queued
// behind a hold whose key expired, and that then takes the free lock, leaves
// others queued behind it: its hold must carry WAITING, so that its release
// grants the lock to the next waiter at once, not when that waiter's own
// timer fires (here 10 s later). Also: an attempt in the hold's last
// millisecond (PTTL answers 0 while EXISTS saw the hash) is told to try
// again in 1 ms; it was told to wait for the queue's head (10 s here), in
// about one run in ten.
func TestQueuedBehindExpiredHoldPassedOn(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	node, _ := hashlock.NewNode("")
	k := node.Keys(key)
	// A hold of a crashed owner: nobody renews or releases it.
	if err := rdb.HSet(ctx, k.Lock, "crashed", 1, "\x00t", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpire(ctx, k.Lock, 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	opts := []lock.ClientOption{lock.WithWaiterTimeout(30 * time.Second)}
	late := newClient(t, nil, opts...)
	type result struct {
		at  time.Time // when Obtain returned
		err error     // Obtain's, else Release's
	}
	done := make(chan result, 1)
	go func() {
		l, err := late.Obtain(ctx, key) // queues, told to wait 10 s
		if err != nil {
			done <- result{err: err}
			return
		}
		at := time.Now()
		done <- result{at, l.Release(ctx)}
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if info, err := late.Inspect(ctx, key); err == nil && len(info.Waiters) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the late waiter never queued")
		}
	}
	if err := rdb.PExpire(ctx, k.Lock, 200*time.Millisecond).Err(); err != nil { // the hold runs out sooner
		t.Fatal(err)
	}
	early := newClient(t, nil, opts...)
	t0 := time.Now()
	l, err := early.Obtain(ctx, key) // queues too, tries again after 200 ms, takes the free lock
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("the early waiter got the lock %v after it began, want about 200 ms (when the hold ran out)", d)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(released); d > 3*time.Second {
		t.Fatalf("the late waiter got the lock %v after the release, want it granted at the release", d)
	}
}

// TestGrantedHoldKeepsWaiting: a release that grants the lock to the first
// of two queued waiters makes a hold with the second still queued: that
// hold must carry WAITING, so that its release grants the lock to the
// second at once (fair and not).
func TestGrantedHoldKeepsWaiting(t *testing.T) {
	for _, fair := range []bool{false, true} {
		name := "unfair"
		if fair {
			name = "fair"
		}
		t.Run(name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			key := uniqueKey(t)
			opts := []lock.ClientOption{lock.WithWaiterTimeout(30 * time.Second)}
			if fair {
				opts = append(opts, lock.WithFair())
			}
			holder := newClient(t, nil, opts...)
			first, second := newClient(t, nil, opts...), newClient(t, nil, opts...)
			h := mustObtain(t, ctx, holder, key, lock.WithTTL(20*time.Second))
			type res struct {
				l   lock.Lease
				at  time.Time
				err error
			}
			obtain := func(c *lock.Client, n int) <-chan res {
				ch := make(chan res, 1)
				go func() {
					l, err := c.Obtain(ctx, key)
					ch <- res{l, time.Now(), err}
				}()
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					if info, err := holder.Inspect(ctx, key); err == nil && len(info.Waiters) == n {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("waiter %d never queued", n)
					}
				}
				return ch
			}
			c1 := obtain(first, 1)
			c2 := obtain(second, 2) // told to wait 10 s (the waiter timeout / 3)
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r1 := <-c1
			if r1.err != nil {
				t.Fatal(r1.err)
			}
			if err := r1.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			r2 := <-c2
			if r2.err != nil {
				t.Fatal(r2.err)
			}
			defer r2.l.Release(ctx)
			if d := r2.at.Sub(released); d > 3*time.Second {
				t.Fatalf("the second waiter got the lock %v after the first released, want it granted at the release", d)
			}
		})
	}
}
