package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/semaphore"
)

// lossyClient is a semaphore client whose connections can lose a
// script's reply after the script ran; go-redis (default options) then
// sends it again, so it runs twice.
func lossyClient(t *testing.T, opts ...semaphore.Option) (*semaphore.Client, *testserver.ReplyLoser) {
	t.Helper()
	r := &testserver.ReplyLoser{}
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), Dialer: r.Dial})
	for _, s := range semaphore.Scripts() {
		if err := s.Preload(context.Background(), rdb); err != nil {
			t.Fatal(err)
		}
	}
	c := semaphore.New(rdb, opts...)
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return c, r
}

// TestLostReplyAcquire: the acquisition of the last free permit runs
// twice; the second run must find the permit its first run took, not
// queue behind it (which would leave an orphan permit until its TTL).
func TestLostReplyAcquire(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := newName(t)
	c, r := lossyClient(t)
	r.Arm(semaphore.Scripts()["acquire.lua"].Carried())
	p, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire whose reply was lost and resent: %v", err)
	}
	if r.Lost() == 0 {
		t.Fatal("no reply was lost")
	}
	if _, h, _ := c.Usage(ctx, name); h != 1 {
		t.Fatalf("%d permits held after one acquisition", h)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	q.Release(ctx)
}

// TestLostReplyRelease: the release runs twice; the caller is told it
// released, not lock.ErrNotHeld.
func TestLostReplyRelease(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	c, r := lossyClient(t)
	p, err := c.TryAcquire(ctx, newName(t))
	if err != nil {
		t.Fatal(err)
	}
	r.Arm(semaphore.Scripts()["release.lua"].Carried())
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release whose reply was lost and resent: %v, want nil", err)
	}
	if r.Lost() == 0 {
		t.Fatal("no reply was lost")
	}
	if err := p.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
}

// TestLostReplyForGoodLeaves: a waiting acquisition whose reply is lost for
// good (retries off) fails, but it ran and queued its waiter; the failed
// call takes the waiter out again, so the next release does not grant the
// permit to a call that already returned.
func TestLostReplyForGoodLeaves(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := newName(t)
	holder := newClient(t, shared.Addr())
	p, err := holder.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	r := &testserver.ReplyLoser{}
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), Dialer: r.Dial, MaxRetries: -1})
	for _, s := range semaphore.Scripts() {
		if err := s.Preload(ctx, rdb); err != nil {
			t.Fatal(err)
		}
	}
	c := semaphore.New(rdb)
	t.Cleanup(func() { c.Close(); rdb.Close() })
	r.Arm(semaphore.Scripts()["acquire.lua"].Carried())
	if _, err := c.Acquire(ctx, name); err == nil {
		t.Fatal("Acquire succeeded although its reply was lost")
	}
	if r.Lost() == 0 {
		t.Fatal("no reply was lost")
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := newClient(t, shared.Addr()).TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v, want the permit (no waiter left to grant it to)", err)
	}
	q.Release(ctx)
}

// waitFor polls cond every 10 ms until it holds, failing t after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLostReplyOtherScripts: renew, leave and setlimit run twice (their
// reply lost, go-redis sends them again) and answer as their first run
// did: the renewed permit stays held (no shorter expiry, no loss), the
// waiter that left is not granted the permit, and N is what was set.
func TestLostReplyOtherScripts(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	name := newName(t)
	c, r := lossyClient(t)

	r.Arm(semaphore.Scripts()["renew.lua"].Carried())
	// 2 s: renewals every 667 ms. A shorter TTL tests the host's load,
	// not the resend: one renewal late by a TTL/3 on a loaded host loses
	// the permit whatever its reply.
	p, err := c.TryAcquire(ctx, name, lock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "lost renewal reply", func() bool { return r.Lost() > 0 })
	until := p.Until()
	waitFor(t, 5*time.Second, "renewal after the resent one", func() bool { return p.Until().After(until) })
	if err := p.Err(); err != nil {
		t.Fatalf("the permit after a resent renewal: %v", err)
	}

	// A waiter that gives up while p is held; its leave is resent.
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	queue := semaphore.DefaultPrefix + "{" + name + "}:q"
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := c.Acquire(wctx, name); done <- err }()
	waitFor(t, 5*time.Second, "queued waiter", func() bool { return rdb.LLen(ctx, queue).Val() == 1 })
	r.Arm(semaphore.Scripts()["leave.lua"].Carried())
	lost := r.Lost()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v", err)
	}
	if r.Lost() == lost {
		t.Fatal("no leave reply was lost")
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, h, _ := c.Usage(ctx, name); h != 0 {
		t.Fatalf("%d permits held after the release: the waiter that left was granted one", h)
	}

	r.Arm(semaphore.Scripts()["setlimit.lua"].Carried())
	lost = r.Lost()
	if err := c.SetPermits(ctx, name, 3); err != nil {
		t.Fatalf("SetPermits whose reply was lost and resent: %v", err)
	}
	if r.Lost() == lost {
		t.Fatal("no setlimit reply was lost")
	}
	if n, _, _ := c.Usage(ctx, name); n != 3 {
		t.Fatalf("N = %d after SetPermits(3)", n)
	}
}

// TestLateAnswerNotReturned: an acquisition whose answer is held up past
// the permit's TTL (a black-holed link towards the client) took a permit
// that Redis may have expired and given to another holder by then: N = 1
// here, and another client holds the only permit when the answer arrives.
// Acquire must not return it (it did, already lost, while the permits held
// were N+1); it gives it back and tries again, and gets a permit with a
// larger token once the other holder releases.
func TestLateAnswerNotReturned(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	name := newName(t)
	proxy := testserver.StartProxy(t, shared.Addr())
	const ttl = 300 * time.Millisecond
	late := newClient(t, proxy.Addr(), semaphore.WithPermits(1))
	other := newClient(t, shared.Addr(), semaphore.WithPermits(1))
	warm, err := late.Acquire(ctx, name+":warm") // scripts loaded, connections open, subscribed
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.SetBlackholeToClient(true) // Redis runs the script; its answer is held up
	type result struct {
		p     lock.Lease
		fresh bool // its deadline ahead when Acquire returned it
		err   error
	}
	done := make(chan result, 1)
	go func() {
		p, err := late.Acquire(ctx, name, lock.WithTTL(ttl))
		// Judged at once: read later, a 300 ms permit may have expired on
		// a starved host since.
		fresh := err == nil && time.Now().Before(p.Until())
		done <- result{p, fresh, err}
	}()
	time.Sleep(ttl + 200*time.Millisecond) // the permit expires in Redis
	held, err := other.Acquire(ctx, name, lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetBlackholeToClient(false) // the late answer arrives
	select {
	case r := <-done:
		if r.err == nil {
			t.Fatalf("Acquire returned a permit (token %d) while another client held the only one (token %d)", r.p.Token(), held.Token())
		}
		t.Fatalf("Acquire: %v", r.err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.p.Release(ctx)
	if !r.fresh {
		t.Fatal("the permit Acquire returned was past its deadline")
	}
	if r.p.Token() <= held.Token() {
		t.Fatalf("token %d, want above the other holder's %d", r.p.Token(), held.Token())
	}
}
