package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// leader returns the index (into Nodes) of the cluster's leader.
func leader(t *testing.T, e *testserver.Etcd, cli *clientv3.Client) int {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	for {
		for i, n := range e.Nodes() {
			if !n.Running() {
				continue
			}
			s, err := cli.Status(ctx, n.Addr())
			if err == nil && s.Leader != 0 && s.Leader == s.Header.MemberId {
				return i
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no leader in 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterLeaderKilled: on a 3-member cluster the leader is killed while
// a lease is held and another Client waits. The lease survives the
// election or is reported lost before the waiter holds; the waiter holds
// after the release with a larger token; the killed member rejoins from its
// data directory.
func TestClusterLeaderKilled(t *testing.T) {
	t.Parallel() // it mostly waits on timers
	e := testserver.StartEtcdCluster(t, 3)
	cli := dial(t, e.Endpoints()...)
	holder, next := newClient(t, cli), newClient(t, dial(t, e.Endpoints()...))
	ctx := ctxFor(t, 30*time.Second)
	l := obtain(t, holder, ctx, "leader")
	lost := lostAt(t, l)
	ch := obtainAfter(ctx, next, "leader", l)
	i := leader(t, e, cli)
	e.Nodes()[i].Kill()
	killed := time.Now()
	select {
	case r := <-ch:
		// Only after the holder was told.
		if !r.prevLost {
			t.Fatalf("a waiter holds (%v) while the holder's lease is not reported lost", r.err)
		}
		t.Logf("holder lost its lease %v after the leader's kill, the waiter held %v after it",
			(<-lost).Sub(killed).Round(time.Millisecond), r.at.Sub(killed).Round(time.Millisecond))
		if r.err != nil {
			t.Fatal(r.err)
		}
		release(t, r.lease)
	case <-time.After(2 * ttl):
		if closed(l.Lost()) {
			t.Logf("holder lost its lease in the election")
		} else {
			t.Logf("the lease survived the election (new leader %d)", leader(t, e, cli))
		}
		if err := l.Release(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
			t.Fatal(err)
		}
		r := await(t, ch, 2*ttl)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.lease.Token() <= l.Token() {
			t.Fatalf("token after the election %d, not above %d", r.lease.Token(), l.Token())
		}
		release(t, r.lease)
	}
	if err := e.Nodes()[i].Start(); err != nil {
		t.Fatal(err)
	}
	l2 := obtain(t, holder, ctx, "leader")
	release(t, l2)
}

// TestClusterMajorityDown: with two members of three killed, nothing can
// renew the lease: Lost closes within the lease's window (plus the time to
// notice); once they are back, Obtain holds again with a larger token.
func TestClusterMajorityDown(t *testing.T) {
	t.Parallel() // it mostly waits on timers
	e := testserver.StartEtcdCluster(t, 3)
	c := newClient(t, dial(t, e.Endpoints()...))
	ctx := ctxFor(t, 30*time.Second)
	l := obtain(t, c, ctx, "majority")
	down := time.Now()
	e.Nodes()[0].Kill()
	e.Nodes()[1].Kill()
	killed := time.Now()
	until := l.(lock.LeaseStatus).Until() // may still move, if a keep-alive was in flight
	wantLost(t, l, lossBound, etcdlock.ErrLeaseLost)
	t.Logf("lost %v after the first kill began, %v after the second ended; %v after Until read then",
		time.Since(down).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), time.Since(until).Round(time.Millisecond))
	// Both at once: a lone member waits for a quorum to report healthy.
	errs := make(chan error, 2)
	for _, n := range e.Nodes()[:2] {
		go func() { errs <- n.Start() }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := e.WaitHealthy(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	back := time.Now()
	l2, err := c.Obtain(octx, "majority")
	if err != nil {
		info, ierr := c.Inspect(ctx, "majority")
		t.Fatalf("Obtain %v after the majority came back: %v (lock: %+v, %v)", time.Since(back), err, info, ierr)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token after the outage %d, not above %d", l2.Token(), l.Token())
	}
	release(t, l2)
}

// TestClusterMemberRemoved: a member of a 3-member cluster is removed
// (etcdctl member remove) while a lease is held and another Client waits.
// When the holder's client knows every member, the removal of the leader
// is an election: the lease survives it or is reported lost before the
// waiter holds. When the holder's client knows only the removed member, it
// can renew nothing more: Lost closes within the lease's window, with
// ErrLeaseLost, before the waiter (which knows the others) holds, and the
// waiter's token is larger.
func TestClusterMemberRemoved(t *testing.T) {
	t.Parallel() // it mostly waits on timers
	for _, tc := range []struct {
		name     string
		onlyGone bool // the holder's client knows only the removed member
	}{{"holder knows every member, leader removed", false}, {"holder knows only the removed member", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := testserver.StartEtcdCluster(t, 3)
			cli := dial(t, e.Endpoints()...)
			gone := leader(t, e, cli)
			if tc.onlyGone {
				gone = (gone + 1) % 3 // a follower
			}
			holderEPs := e.Endpoints()
			if tc.onlyGone {
				holderEPs = []string{e.Nodes()[gone].Addr()}
			}
			var rest []string
			for i, n := range e.Nodes() {
				if i != gone {
					rest = append(rest, n.Addr())
				}
			}
			holder, next := newClient(t, dial(t, holderEPs...)), newClient(t, dial(t, rest...))
			ctx := ctxFor(t, 40*time.Second)
			l := obtain(t, holder, ctx, "removed")
			lost := lostAt(t, l)
			ch := obtainAfter(ctx, next, "removed", l)
			removing := time.Now()
			if err := e.RemoveMember(gone); err != nil {
				t.Fatal(err)
			}
			t.Logf("member %d removed in %v", gone, time.Since(removing).Round(time.Millisecond))
			if tc.onlyGone {
				wantLost(t, l, lossBound+10*time.Second, etcdlock.ErrLeaseLost)
				r := await(t, ch, 2*ttl)
				if r.err != nil {
					t.Fatal(r.err)
				}
				if !r.prevLost {
					t.Fatal("the waiter holds while the holder's lease is not reported lost")
				}
				t.Logf("holder lost its lease %v after the removal began, the waiter held %v after it",
					(<-lost).Sub(removing).Round(time.Millisecond), r.at.Sub(removing).Round(time.Millisecond))
				if r.lease.Token() <= l.Token() {
					t.Fatalf("token after the removal %d, not above %d", r.lease.Token(), l.Token())
				}
				releaseOrLost(t, r.lease)
				return
			}
			select {
			case r := <-ch:
				if !r.prevLost {
					t.Fatalf("a waiter holds (%v) while the holder's lease is not reported lost", r.err)
				}
				if r.err != nil {
					t.Fatal(r.err)
				}
				t.Logf("holder lost its lease in the removal; the waiter held %v after it began", r.at.Sub(removing).Round(time.Millisecond))
				releaseOrLost(t, r.lease)
			case <-time.After(2 * ttl):
				if closed(l.Lost()) {
					t.Logf("holder lost its lease in the removal")
				} else {
					t.Logf("the lease survived the removal of the leader")
				}
				if err := l.Release(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
					t.Fatal(err)
				}
				r := await(t, ch, 2*ttl)
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.lease.Token() <= l.Token() {
					t.Fatalf("token after the removal %d, not above %d", r.lease.Token(), l.Token())
				}
				releaseOrLost(t, r.lease)
			}
			l2 := obtain(t, holder, ctx, "removed") // the holder's client goes on with the other two
			release(t, l2)
		})
	}
}

// releaseOrLost releases lease, which may also have been lost meanwhile: a
// member's removal stalls keep-alives, and on a loaded host the stall can
// outlast the lease's window (the waiter's lease was lost so, 5 s into a
// removal, in a run of make test-stress). The loss must then have been
// reported: Release answers lock.ErrNotHeld only with Lost closed.
func releaseOrLost(t *testing.T, lease lock.Lease) {
	t.Helper()
	err := lease.Release(ctxFor(t, 5*time.Second))
	if err != nil && !(errors.Is(err, lock.ErrNotHeld) && closed(lease.Lost())) {
		t.Fatalf("Release %q: %v (Lost closed: %v)", lease.Key(), err, closed(lease.Lost()))
	}
}
