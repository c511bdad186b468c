package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/zklock"
)

func withSession(d time.Duration) zklock.Option { return zklock.WithSessionTimeout(d) }

// obtainAsync starts Obtain on l in a goroutine; the result arrives on the
// returned channel, with the time it was obtained.
type result struct {
	lease lock.Lease
	at    time.Time
	err   error
}

func obtainAsync(ctx context.Context, l lock.Locker, key string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		lease, err := l.Obtain(ctx, key)
		ch <- result{lease, time.Now(), err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Obtain: %v", r.err)
		}
		return r
	case <-time.After(within):
		t.Fatalf("not obtained within %v", within)
		return result{}
	}
}

// TestSessionExpired expires the holder's session for real: its Do's ctx is
// cancelled with ErrLockLost before the next waiter acquires.
func TestSessionExpired(t *testing.T) {
	key := "expire"
	hconn := dial(t, server, time.Second)
	holder := newClient(t, hconn)
	wconn := dial(t, server, sessionTimeout)
	waiter := newClient(t, wconn)

	held := make(chan struct{})
	var lostAt time.Time
	doErr := make(chan error, 1)
	go func() {
		doErr <- lock.Do(context.Background(), holder, key, func(ctx context.Context) error {
			close(held)
			<-ctx.Done()
			lostAt = time.Now()
			if !errors.Is(context.Cause(ctx), lock.ErrLockLost) {
				return fmt.Errorf("fn's ctx ended with cause %v, want ErrLockLost", context.Cause(ctx))
			}
			return ctx.Err()
		})
	}()
	<-held
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := obtainAsync(ctx, waiter, key)
	waitChildren(t, wconn, key, 2)

	if err := hconn.Expire(); err != nil {
		t.Fatal(err)
	}
	if err := <-doErr; !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
	r := await(t, next, 10*time.Second)
	if !lostAt.Before(r.at) {
		t.Fatalf("holder learnt of the loss at %v, after the waiter acquired at %v", lostAt, r.at)
	}
	// The holder's Client works on in the conn's new session.
	if _, err := holder.TryObtain(context.Background(), key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryObtain after expiry, key held by the waiter: %v", err)
	}
	release(t, r.lease)
	release(t, obtain(t, holder, context.Background(), key))
}

// TestHolderGone: a holder cut off for good (its process dead) is replaced
// within the session timeout; one that closes its connection at once.
func TestHolderGone(t *testing.T) {
	const timeout = time.Second
	tests := []struct {
		name  string
		kill  func(*testserver.ZKConn)
		bound time.Duration
	}{
		// The server expires the session a timeout after it last heard from
		// it (rounded up to a tick); the rest is slack for a noisy machine.
		{"partitioned", func(c *testserver.ZKConn) { c.Partition(true) }, timeout + testserver.ZKTick + time.Second},
		{"connection closed", func(c *testserver.ZKConn) { c.Close() }, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "gone"
			hconn := dial(t, server, timeout)
			holder := newClient(t, hconn, withSession(timeout))
			wconn := dial(t, server, sessionTimeout)
			waiter := newClient(t, wconn)
			lease := obtain(t, holder, context.Background(), key)
			next := obtainAsync(context.Background(), waiter, key)
			waitChildren(t, wconn, key, 2)

			start := time.Now()
			tt.kill(hconn)
			r := await(t, next, 10*time.Second)
			if d := r.at.Sub(start); d > tt.bound {
				t.Errorf("next waiter acquired %v after the holder went, want within %v", d, tt.bound)
			}
			select {
			case <-lease.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("the gone holder's lease is not reported lost")
			}
			if err := lease.Release(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("Release of a lost lease: %v, want ErrNotHeld", err)
			}
			hconn.Partition(false)
			release(t, r.lease)
		})
	}
}

// TestDisconnectionGrace: with WithSessionTimeout, a short outage does not
// lose the lease; one longer than half the timeout does, and the node is
// deleted once the connection is back.
func TestDisconnectionGrace(t *testing.T) {
	key := "grace"
	// go-zookeeper waits a second before it dials a standalone server again,
	// so the outage a lease survives (about T/3) must exceed that.
	const long = 6 * time.Second
	conn := dial(t, server, long)
	c := newClient(t, conn, withSession(long))
	lease := obtain(t, c, context.Background(), key)
	for _, p := range conn.Proxies() {
		p.Cut() // reconnects to the same session
	}
	release(t, obtain(t, c, context.Background(), "other")) // round trip on the new connection
	if closed(lease.Lost()) {
		t.Fatal("lease lost after a brief disconnection")
	}
	release(t, lease)

	const short = 1500 * time.Millisecond
	conn = dial(t, server, short)
	c = newClient(t, conn, withSession(short))
	lease = obtain(t, c, context.Background(), key)
	conn.Partition(true)
	// Lost T/2 after the send of the last heartbeat answered.
	select {
	case <-lease.Lost():
	case <-time.After(short + time.Second):
		t.Fatal("lease not lost during an outage of the session timeout")
	}
	conn.Partition(false)
	waitChildren(t, conn, key, 0)
	if err := lease.Release(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of a lost lease: %v, want ErrNotHeld", err)
	}
}

// TestCreateReplyLost loses the reply to the create: protected mode finds
// the node by its UUID and uses it, leaving no ghost.
func TestCreateReplyLost(t *testing.T) {
	key := "protected"
	conn := dial(t, server, 4*time.Second)
	c := newClient(t, conn)
	observer := dial(t, server, sessionTimeout)
	release(t, obtain(t, c, context.Background(), key)) // parents exist

	p := conn.Proxies()[0]
	p.SetLatency(300 * time.Millisecond)
	next := obtainAsync(context.Background(), c, key)
	waitChildren(t, observer, key, 1) // applied; the reply is still in the proxy
	p.Cut()
	p.SetLatency(0)
	r := await(t, next, 10*time.Second)
	names := children(t, observer, key)
	if len(names) != 1 {
		t.Fatalf("lock nodes %v, want one", names)
	}
	_, st, err := observer.Get(parentOf(t, key) + "/" + names[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.lease.Token() != st.Czxid {
		t.Fatalf("token %d, want the node's czxid %d", r.lease.Token(), st.Czxid)
	}
	release(t, r.lease)
	waitChildren(t, observer, key, 0)
}

// TestCreateReplyLostAndCancelled: the reply is lost, the connection stays
// down and the caller gives up: the node created meanwhile is deleted once
// the connection is back.
func TestCreateReplyLostAndCancelled(t *testing.T) {
	key := "protected-cancel"
	conn := dial(t, server, 4*time.Second)
	c := newClient(t, conn)
	observer := dial(t, server, sessionTimeout)
	release(t, obtain(t, c, context.Background(), key))

	p := conn.Proxies()[0]
	p.SetLatency(300 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	next := obtainAsync(ctx, c, key)
	waitChildren(t, observer, key, 1)
	p.SetBlackhole(true)
	p.Cut() // the reconnection hangs in the black hole
	p.SetLatency(0)
	cancel()
	select {
	case r := <-next:
		if !errors.Is(r.err, lock.ErrNotObtained) || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Obtain: %v, want ErrNotObtained and context.Canceled", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled Obtain did not return")
	}
	p.SetBlackhole(false)
	waitChildren(t, observer, key, 0)
}

// TestEnsembleNodeKilled kills the leader of a 3-node ensemble while
// clients lock: locking goes on, exclusive throughout.
func TestEnsembleNodeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node ensemble")
	}
	z := testserver.StartZooKeeperEnsemble(t, 3)
	const key = "ensemble"
	var clients []*zklock.Client
	for range 2 {
		conn := dial(t, z, 4*time.Second)
		clients = append(clients, newClient(t, conn, withSession(4*time.Second)))
	}
	var inside, overlaps, sections atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := lock.Do(ctx, c, key, func(ctx context.Context) error {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					return nil
				})
				cancel()
				if err == nil {
					sections.Add(1)
				}
			}
		}()
	}
	waitSections := func(n int64) {
		t.Helper()
		want := sections.Load() + n
		deadline := time.Now().Add(30 * time.Second)
		for sections.Load() < want {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("only %d sections, want %d", sections.Load(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitSections(20)
	for _, n := range z.Nodes() {
		if m, err := n.Mode(); err == nil && m == "leader" {
			n.Kill()
			break
		}
	}
	waitSections(20)
	close(stop)
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlapping critical sections", n)
	}
}
