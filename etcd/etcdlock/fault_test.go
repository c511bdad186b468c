package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestLostBeforeTakeover: the holder's link to etcd goes silent (a
// black-holed proxy, both ways, and only one way); its Lost must close
// before a waiter on another client holds the lock, which happens once the
// server expires the holder's lease (or, when the server still hears the
// holder, once the holder revokes the lease it took as lost).
func TestLostBeforeTakeover(t *testing.T) {
	t.Parallel() // it mostly waits on timers
	for _, tc := range []struct {
		name string
		cut  func(p *testserver.Proxy)
	}{
		{"both ways", func(p *testserver.Proxy) { p.SetBlackhole(true) }},
		{"to the server", func(p *testserver.Proxy) { p.SetBlackholeToServer(true) }},
		{"to the client", func(p *testserver.Proxy) { p.SetBlackholeToClient(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy := testserver.StartProxy(t, server.Nodes()[0].Addr())
			holder := newClient(t, dial(t, proxy.Addr()))
			next := newClient(t, dial(t, server.Endpoints()...))
			ctx := ctxFor(t, 20*time.Second)
			key := "takeover"
			l := obtain(t, holder, ctx, key)
			lost := lostAt(t, l)
			ch := obtainAfter(ctx, next, key, l)
			time.Sleep(ttl / 2) // a few keep-alives answered
			cut := time.Now()
			tc.cut(proxy)
			lostTime := <-lost
			r := await(t, ch, 3*ttl)
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer release(t, r.lease)
			t.Logf("after the cut: lost %v, taken over %v (TTL %v)", lostTime.Sub(cut).Round(time.Millisecond),
				r.at.Sub(cut).Round(time.Millisecond), ttl)
			if !r.prevLost {
				t.Fatalf("a waiter holds while the holder's lease is not reported lost (lost at %v, taken over at %v)",
					lostTime.Sub(cut), r.at.Sub(cut))
			}
			if err := lock.LostCause(l); !errors.Is(err, etcdlock.ErrLeaseLost) {
				t.Fatalf("LostCause: %v, want ErrLeaseLost", err)
			}
			if r.lease.Token() <= l.Token() {
				t.Fatalf("new holder's token %d not above %d", r.lease.Token(), l.Token())
			}
			proxy.Reset()
			if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("Release of the lost lease: %v, want lock.ErrNotHeld", err)
			}
		})
	}
}

// TestRevokedLease: an operator revokes the Client's lease (etcdctl lease
// revoke). The next Obtain must not be granted on it: the transaction's put
// is refused, and the Client holds on a new lease. The holds on the revoked
// lease are reported lost, and its keys are gone.
func TestRevokedLease(t *testing.T) {
	cli := dial(t, server.Endpoints()...)
	// A keep-alive every 5 s: the Client learns of the revocation from
	// the refused transaction, not from a keep-alive.
	c := newClient(t, cli, etcdlock.WithTTL(30*time.Second))
	ctx := ctxFor(t, 10*time.Second)
	l := obtain(t, c, ctx, "revoked-1")
	info, err := c.Inspect(ctx, "revoked-1")
	if err != nil {
		t.Fatal(err)
	}
	old := info.Holder.Lease
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(old)); err != nil {
		t.Fatal(err)
	}
	// At once, before a keep-alive can tell the Client.
	l2, err := c.TryObtain(ctx, "revoked-2")
	if err != nil {
		t.Fatal(err)
	}
	info2, err := c.Inspect(ctx, "revoked-2")
	if err != nil {
		t.Fatal(err)
	}
	if info2.Holder.Lease == old || info2.Holder.Token != l2.Token() {
		t.Fatalf("hold granted on lease %x (the revoked one: %x), token %d (lease's %d)", info2.Holder.Lease, old, info2.Holder.Token, l2.Token())
	}
	// Already when TryObtain returned: the refused transaction told it.
	wantLost(t, l, 0, etcdlock.ErrLeaseLost)
	if ks := holdKeys(t, cli, "revoked-1"); len(ks) != 0 {
		t.Fatalf("hold keys of the revoked lease: %v", ks)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release on the revoked lease: %v, want lock.ErrNotHeld", err)
	}
	release(t, l2)
	// Revoked while held, the Client learns from its next keep-alive
	// (every T/6).
	c = newClient(t, cli)
	l3 := obtain(t, c, ctx, "revoked-3")
	info3, _ := c.Inspect(ctx, "revoked-3")
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(info3.Holder.Lease)); err != nil {
		t.Fatal(err)
	}
	wantLost(t, l3, ttl, etcdlock.ErrLeaseLost)
	if err := l3.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release after the revocation: %v, want lock.ErrNotHeld", err)
	}
}

// TestServerKilled: the server is killed while a lease is held: Lost closes
// within the lease's window; after a restart (from its data directory) the
// Client obtains again, on a new lease, with a larger token.
func TestServerKilled(t *testing.T) {
	t.Parallel() // it mostly waits on timers
	e := testserver.StartEtcd(t)
	cli := dial(t, e.Endpoints()...)
	c := newClient(t, cli)
	ctx := ctxFor(t, 30*time.Second)
	l := obtain(t, c, ctx, "killed")
	killed := time.Now()
	e.Nodes()[0].Kill()
	wantLost(t, l, lossBound, etcdlock.ErrLeaseLost)
	t.Logf("lost %v after the kill", time.Since(killed).Round(time.Millisecond))
	if err := e.Nodes()[0].Start(); err != nil {
		t.Fatal(err)
	}
	l2 := obtain(t, c, ctx, "killed")
	if l2.Token() <= l.Token() {
		t.Fatalf("token after the restart %d, not above %d", l2.Token(), l.Token())
	}
	release(t, l2)
}

// TestServerPaused: the server is paused (SIGSTOP) while a lease is held:
// Lost closes while it is stopped; after SIGCONT another Client obtains the
// lock with a larger token.
func TestServerPaused(t *testing.T) {
	t.Parallel() // it mostly waits on timers
	e := testserver.StartEtcd(t)
	c := newClient(t, dial(t, e.Endpoints()...))
	other := newClient(t, dial(t, e.Endpoints()...))
	ctx := ctxFor(t, 30*time.Second)
	l := obtain(t, c, ctx, "paused")
	n := e.Nodes()[0]
	paused := time.Now()
	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	wantLost(t, l, lossBound, etcdlock.ErrLeaseLost)
	t.Logf("lost %v after the pause", time.Since(paused).Round(time.Millisecond))
	if err := n.Resume(); err != nil {
		t.Fatal(err)
	}
	l2 := obtain(t, other, ctx, "paused")
	if l2.Token() <= l.Token() {
		t.Fatalf("token after the pause %d, not above %d", l2.Token(), l.Token())
	}
	release(t, l2)
}

// lostAt returns a channel that receives the time the lease's Lost
// closed, if it closes before the test ends.
func lostAt(t *testing.T, lease lock.Lease) <-chan time.Time {
	ch := make(chan time.Time, 1)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		select {
		case <-lease.Lost():
			ch <- time.Now()
		case <-done:
		}
	}()
	return ch
}

// TestWaiterLeaseRevoked: a waiter's lease is revoked while it waits; its
// hold key goes with the lease, and the waiter queues again on a new lease
// (behind nobody new) and holds once the holder releases.
func TestWaiterLeaseRevoked(t *testing.T) {
	cli := dial(t, server.Endpoints()...)
	holder, waiter := newClient(t, cli), newClient(t, cli)
	ctx := ctxFor(t, 10*time.Second)
	key := "waiter-revoked"
	l := obtain(t, holder, ctx, key)
	ch := obtainAsync(ctx, waiter, key)
	var first etcdlock.Entry
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		info, err := holder.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiters) == 1 {
			first = info.Waiters[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("waiter's hold key not made in 5 s")
		}
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(first.Lease)); err != nil {
		t.Fatal(err)
	}
	// The waiter queues again, on a new lease.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		info, err := holder.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiters) == 1 && info.Waiters[0].Lease != first.Lease {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiter not queued again on a new lease in 5 s: %+v", info)
		}
	}
	select {
	case r := <-ch:
		t.Fatalf("waiter returned while the lock is held: %v", r.err)
	default:
	}
	release(t, l)
	r := await(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lease.Token() <= first.Token {
		t.Fatalf("waiter's token %d, not above its first hold key's %d", r.lease.Token(), first.Token)
	}
	release(t, r.lease)
}
