package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestCancelledCreateAfterExpiry: right after a session expiry go-zookeeper
// has no session (ID 0) for a second before it dials again. An Obtain whose
// ctx ends then has queued its create, which go-zookeeper sends under the
// new session: the Client must delete that node, judged by its
// ephemeralOwner against the current session, or it blocks the key for the
// life of the new session.
func TestCancelledCreateAfterExpiry(t *testing.T) {
	key := "expired-create"
	conn := dial(t, server, time.Second)
	c := newClient(t, conn)
	oconn := dial(t, server, sessionTimeout)
	other := newClient(t, oconn)
	release(t, obtain(t, c, context.Background(), key)) // the parents exist

	if err := conn.Expire(); err != nil {
		t.Fatal(err)
	}
	sid := conn.SessionID()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := c.Obtain(ctx, key)
	cancel()
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Obtain without a session: %v, want ErrNotObtained", err)
	}
	t.Logf("session ID when Obtain started: %d", sid)
	// The new session is there; whatever the queued create made is deleted.
	deadline := time.Now().Add(10 * time.Second)
	for conn.State() != zk.StateHasSession || conn.SessionID() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no new session")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := other.Obtain(ctx, key)
	if err != nil {
		t.Fatalf("another client's Obtain after the cancelled one: %v (lock nodes %v)", err, children(t, oconn, key))
	}
	release(t, lease)
}

// takeover is what TestLostBeforeTakeover measures: when the holder's lease
// was reported lost, and when another client acquired the key.
type takeover struct {
	fault, lost, acquired time.Time
}

// runTakeover: a holder (session timeout T, WithSessionTimeout(T)) holds
// key; a waiter on another connection queues for it; the holder's Client
// also waits for a second key that a third client holds, so that a watch is
// armed on its connection (releasing that key sends it a notification). Then
// fault cuts the holder off; it may call notify to release the second key.
// runTakeover returns once the holder's lease is lost and the waiter holds
// the key.
func runTakeover(t *testing.T, z *testserver.ZooKeeper, T time.Duration, hconn *testserver.ZKConn,
	fault func(notify func()) time.Time) takeover {
	t.Helper()
	bg := context.Background()
	holder := newClient(t, hconn, withSession(T))
	third := newClient(t, dial(t, z, sessionTimeout))
	wconn := dial(t, z, sessionTimeout)
	waiter := newClient(t, wconn)

	other := obtain(t, third, bg, "notify")
	// Its watch is on other's node. Its ctx ends when the test does, and
	// the test waits for it before the Clients and connections close: an
	// Obtain still running when its zk.Conn closes can meet go-zookeeper
	// v1.0.4's data race (CreateContainer reads its reply's path after
	// ErrConnectionClosed while the receive loop may still write it).
	actx, acancel := context.WithCancel(bg)
	armed := obtainAsync(actx, holder, "notify")
	waitChildren(t, wconn, "notify", 2)
	lease := obtain(t, holder, bg, "held")
	next := obtainAsync(bg, waiter, "held")
	waitChildren(t, wconn, "held", 2)

	lost := lostAt(lease)
	at := fault(func() { release(t, other) })
	m := awaitTakeover(t, lost, next, at, 4*T)
	t.Cleanup(func() {
		acancel()
		select {
		case r := <-armed:
			if r.err == nil {
				r.lease.Release(bg)
			}
		case <-time.After(30 * time.Second):
			t.Error("the holder's Obtain of the second key did not end within 30 s of its ctx")
		}
	})
	return m
}

// lostAt delivers the time lease is lost (or its Client closed).
func lostAt(lease lock.Lease) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		<-lease.Lost()
		ch <- time.Now()
	}()
	return ch
}

// awaitTakeover waits until the lease is lost (lost, from lostAt) and next
// (another client's Obtain) has the lock, and logs when each happened after
// the fault.
func awaitTakeover(t *testing.T, lost <-chan time.Time, next <-chan result, fault time.Time, limit time.Duration) takeover {
	t.Helper()
	m := takeover{fault: fault}
	timeout := time.After(limit)
	for lost != nil || next != nil {
		select {
		case m.lost = <-lost:
			lost = nil
		case r := <-next:
			if r.err != nil {
				t.Fatalf("waiter's Obtain: %v", r.err)
			}
			m.acquired, next = r.at, nil
			t.Cleanup(func() { r.lease.Release(context.Background()) })
		case <-timeout:
			t.Fatalf("%v after the fault: lost at %v, acquired at %v", limit, m.lost, m.acquired)
		}
	}
	t.Logf("lost %v after the fault, waiter acquired %v after it: lost %v before the takeover",
		m.lost.Sub(m.fault).Round(time.Millisecond), m.acquired.Sub(m.fault).Round(time.Millisecond),
		m.acquired.Sub(m.lost).Round(time.Millisecond))
	return m
}

// TestLostBeforeTakeover: a holder cut off from ZooKeeper is told its lease
// is lost before the server expires its session and another client takes
// the lock: loss is measured from the send time of the last heartbeat the
// server answered, not from the last packet go-zookeeper received (a watch
// notification or a late reply counts there), and a half-open link (the
// server hears nothing, the client still receives) changes nothing.
func TestLostBeforeTakeover(t *testing.T) {
	const T = 3 * time.Second
	tests := []struct {
		name  string
		fault func(hconn *testserver.ZKConn, dialed time.Time, notify func()) time.Time
	}{
		{"partition", func(hconn *testserver.ZKConn, _ time.Time, _ func()) time.Time {
			at := time.Now()
			hconn.Partition(true)
			return at
		}},
		{"partition after holding for T/2", func(hconn *testserver.ZKConn, _ time.Time, _ func()) time.Time {
			time.Sleep(T / 2) // the heartbeats have run long enough for the longer window
			at := time.Now()
			hconn.Partition(true)
			return at
		}},
		{"notification just before the partition", func(hconn *testserver.ZKConn, dialed time.Time, notify func()) time.Time {
			// go-zookeeper pings every T/3 from the connection's start: cut
			// just before a ping, so that the server last heard from the
			// client almost T/3 earlier, and right after a notification,
			// so that go-zookeeper last heard from the server just now.
			x := dialed
			for time.Until(x) < 300*time.Millisecond {
				x = x.Add(T / 3)
			}
			x = x.Add(-150 * time.Millisecond)
			time.Sleep(time.Until(x) - 100*time.Millisecond)
			notify()
			time.Sleep(time.Until(x))
			at := time.Now()
			hconn.Partition(true)
			return at
		}},
		{"half-open link", func(hconn *testserver.ZKConn, _ time.Time, notify func()) time.Time {
			at := time.Now()
			for _, p := range hconn.Proxies() {
				p.SetBlackholeToServer(true)
			}
			time.Sleep(T / 2)
			notify() // reaches the holder; nothing of it reaches the server
			return at
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hconn := dial(t, server, T)
			dialed := time.Now()
			defer func() { // before the Clients close: they wait for their requests
				for _, p := range hconn.Proxies() {
					p.Reset()
				}
			}()
			m := runTakeover(t, server, T, hconn, func(notify func()) time.Time {
				return tt.fault(hconn, dialed, notify)
			})
			if !m.lost.Before(m.acquired) {
				t.Fatalf("lease lost %v after the fault, %v after another client acquired the lock",
					m.lost.Sub(m.fault).Round(time.Millisecond), m.lost.Sub(m.acquired).Round(time.Millisecond))
			}
		})
	}
}

// TestLostBeforeTakeoverFollowerCutOff: on a 3-node ensemble whose followers
// go on serving for 5 s (syncLimit 25 ticks) after losing their leader, a
// holder connected to a follower that is cut off from the other nodes is
// told of the loss before the leader expires its session (T = 3 s) and
// another client takes the lock. Its heartbeat is a sync, which the
// follower cannot answer alone; go-zookeeper's pings, which the follower
// does answer, would keep the holder confident until the follower gives up.
func TestLostBeforeTakeoverFollowerCutOff(t *testing.T) {
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
	bg := context.Background()
	hconn := z.DialNodeT(t, follower, T, nil)
	holder := newClient(t, hconn, withSession(T))
	wconn := z.DialNodeT(t, leader, sessionTimeout, nil)
	waiter := newClient(t, wconn)
	lease := obtain(t, holder, bg, "held")
	next := obtainAsync(bg, waiter, "held")
	waitChildren(t, wconn, "held", 2)

	lost := lostAt(lease)
	fault := time.Now()
	if err := z.Isolate(follower, true); err != nil {
		t.Fatal(err)
	}
	defer z.Isolate(follower, false) // before the Clients close: they wait for their requests
	m := awaitTakeover(t, lost, next, fault, 4*T)
	if !m.lost.Before(m.acquired) {
		t.Fatalf("lease lost %v after the fault, %v after another client acquired the lock",
			m.lost.Sub(m.fault).Round(time.Millisecond), m.lost.Sub(m.acquired).Round(time.Millisecond))
	}
}
