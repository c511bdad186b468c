package workerid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// zkLeaserOn is zkLeaser on a connection of the test's choosing, with the
// session timeout it was dialled with.
func zkLeaserOn(t *testing.T, c *testserver.ZKConn, timeout time.Duration, opts ...workerid.Option) *workerid.ZKLeaser {
	t.Helper()
	opts = append([]workerid.Option{
		workerid.WithRoot(zkRoot(t)),
		workerid.WithSessionTimeout(timeout),
	}, opts...)
	l, err := workerid.NewZK(c.Conn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func zkRoot(t *testing.T) string { return "/test/" + strings.ReplaceAll(t.Name(), "/", "_") }

// waitNode waits until p exists (or not) as seen through c.
func waitNode(t *testing.T, c *testserver.ZKConn, p string, exists bool) *zk.Stat {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, st, err := c.Exists(p)
		if err == nil && ok == exists {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: exists %v (%v), want %v", p, ok, err, exists)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type leaseResult struct {
	lease *workerid.Lease
	err   error
}

func leaseAsync(ctx context.Context, l *workerid.ZKLeaser, service string) <-chan leaseResult {
	ch := make(chan leaseResult, 1)
	go func() {
		lease, err := l.Lease(ctx, service)
		ch <- leaseResult{lease, err}
	}()
	return ch
}

// TestZKCreateReplyLost loses the reply to the ID node's create (the proxy
// delays it, then the connection is cut): the leaser looks for the node,
// finds it owned by its live session and adopts it, so the ID does not leak
// for the life of the session.
func TestZKCreateReplyLost(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	const timeout = 6 * time.Second // outlives go-zookeeper's second before it redials
	c := zkServer.DialT(t, timeout, nil)
	l := zkLeaserOn(t, c, timeout, workerid.WithMax(0))
	observer := zkServer.DialT(t, zkSession, nil)
	first, err := l.Lease(ctx, "svc") // the parents exist
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	node := zkRoot(t) + "/svc/ids/0"
	sid := c.SessionID()

	p := c.Proxies()[0]
	p.SetLatency(300 * time.Millisecond)
	next := leaseAsync(ctx, l, "svc")
	waitNode(t, observer, node, true) // applied; the reply is still in the proxy
	p.Cut()
	p.SetLatency(0)
	var r leaseResult
	select {
	case r = <-next:
	case <-time.After(20 * time.Second):
		t.Fatal("Lease did not return")
	}
	if r.err != nil {
		t.Fatalf("Lease after the create's reply was lost: %v (node %s left behind)", r.err, node)
	}
	release(t, r.lease)
	if r.lease.ID() != 0 {
		t.Fatalf("leased ID %d, want 0", r.lease.ID())
	}
	st := waitNode(t, observer, node, true)
	if c.SessionID() != sid || st.EphemeralOwner != sid {
		t.Fatalf("node owned by session %#x; leaser's session %#x, was %#x", st.EphemeralOwner, c.SessionID(), sid)
	}
	if err := r.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitNode(t, observer, node, false)
}

// TestZKCreateReplyLostAndCancelled: the reply is lost, the connection stays
// down and the caller gives up; once the connection is back (same session)
// the leaser deletes the node the create made.
func TestZKCreateReplyLostAndCancelled(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	const timeout = 6 * time.Second
	c := zkServer.DialT(t, timeout, nil)
	l := zkLeaserOn(t, c, timeout, workerid.WithMax(0))
	observer := zkServer.DialT(t, zkSession, nil)
	first, err := l.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	node := zkRoot(t) + "/svc/ids/0"
	sid := c.SessionID()

	p := c.Proxies()[0]
	p.SetLatency(300 * time.Millisecond)
	lctx, cancel := context.WithCancel(ctx)
	next := leaseAsync(lctx, l, "svc")
	waitNode(t, observer, node, true)
	p.SetBlackhole(true)
	p.Cut() // the reconnection hangs in the black hole
	p.SetLatency(0)
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case r := <-next:
		if r.err == nil {
			release(t, r.lease)
			t.Fatalf("Lease succeeded with ID %d through a black hole", r.lease.ID())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled Lease did not return")
	}
	p.SetBlackhole(false)
	waitNode(t, observer, node, false)
	if c.SessionID() != sid {
		t.Fatalf("session changed (%#x, was %#x): the node went with it, which proves nothing", c.SessionID(), sid)
	}
}

// TestZKLeaseLostBeforeTakeoverFollowerCutOff: on a 3-node ensemble whose
// followers go on serving for 5 s after losing their leader (syncLimit 25
// ticks), a lease held through a follower cut off from the other nodes is
// lost before the leader expires the session (T = 3 s) and another process
// leases the same ID. The heartbeat syncs first, which the follower cannot
// answer alone; an exists alone it answers from its own copy.
func TestZKLeaseLostBeforeTakeoverFollowerCutOff(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	const T = 3 * time.Second
	z := testserver.StartZooKeeperEnsembleWith(t, 3, testserver.ZKEnsembleOptions{SyncLimit: 25, PeerProxies: true})
	leader, follower := -1, -1
	for i, n := range z.Nodes() {
		switch m, err := n.Mode(); {
		case err != nil:
			t.Fatal(err)
		case m == "leader":
			leader = i
		case m == "follower":
			follower = i
		}
	}
	if leader < 0 || follower < 0 {
		t.Fatalf("no leader (%d) or follower (%d)", leader, follower)
	}
	holder := zkLeaserOn(t, z.DialNodeT(t, follower, T, nil), T, workerid.WithMax(0))
	other := zkLeaserOn(t, z.DialNodeT(t, leader, zkSession, nil), zkSession, workerid.WithMax(0))
	a, err := holder.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	release(t, a)

	fault := time.Now()
	if err := z.Isolate(follower, true); err != nil {
		t.Fatal(err)
	}
	defer z.Isolate(follower, false)
	awaitIDTakeover(ctx, t, a, other, fault, 4*T)
}

// TestZKHalfOpenLosesLeaseBeforeTakeover: the server hears nothing from the
// holder while the holder still receives (a half-open link); the lease is
// lost before the session expires and another process leases the ID, at
// once (the lease's first, shorter window) and after T/2 of heartbeats.
func TestZKHalfOpenLosesLeaseBeforeTakeover(t *testing.T) {
	const T = 3 * time.Second
	for _, held := range []time.Duration{0, T / 2} {
		t.Run(fmt.Sprintf("held %v", held), func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			c := zkServer.DialT(t, T, nil)
			holder := zkLeaserOn(t, c, T, workerid.WithMax(0))
			other := zkLeaserOn(t, zkServer.DialT(t, zkSession, nil), zkSession, workerid.WithMax(0))
			a, err := holder.Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			release(t, a)
			time.Sleep(held)
			fault := time.Now()
			for _, p := range c.Proxies() {
				p.SetBlackholeToServer(true)
			}
			defer func() {
				for _, p := range c.Proxies() {
					p.Reset()
				}
			}()
			awaitIDTakeover(ctx, t, a, other, fault, 4*T)
		})
	}
}

// awaitIDTakeover polls other for a's worker ID until a is lost and other
// has leased the ID, and fails unless a was lost first.
func awaitIDTakeover(ctx context.Context, t *testing.T, a *workerid.Lease, other *workerid.ZKLeaser, fault time.Time, limit time.Duration) {
	t.Helper()
	var lost, taken time.Time
	deadline := time.Now().Add(limit)
	for lost.IsZero() || taken.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("%v after the fault: lost at %v, taken at %v", limit, lost, taken)
		}
		if lost.IsZero() {
			select {
			case <-a.Lost():
				lost = time.Now()
			default:
			}
		}
		if taken.IsZero() {
			b, err := other.Lease(ctx, a.Service())
			switch {
			case err == nil:
				taken = time.Now()
				release(t, b)
			case !errors.Is(err, workerid.ErrExhausted):
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("lost %v after the fault, the ID leased again %v after it: lost %v before",
		lost.Sub(fault).Round(time.Millisecond), taken.Sub(fault).Round(time.Millisecond),
		taken.Sub(lost).Round(time.Millisecond))
	if !lost.Before(taken) {
		t.Fatalf("lease lost %v after another process leased its ID", lost.Sub(taken).Round(time.Millisecond))
	}
}
