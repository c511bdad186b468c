package lock_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
)

// replyLoser is a go-redis Dialer whose connections lose the reply to the
// next command carrying an armed script's SHA: the command reaches Redis
// and runs, then the connection is cut before its reply is read, and
// go-redis (default options: MaxRetries 3) sends it again on a new
// connection. So the script runs twice, as after a real lost reply.
type replyLoser struct {
	mu    sync.Mutex
	armed [][]byte // SHAs whose next reply is lost, once each
	lost  atomic.Int32
}

func (r *replyLoser) arm(script string) {
	r.mu.Lock()
	r.armed = append(r.armed, []byte(lock.Scripts()[script].Hash()))
	r.mu.Unlock()
}

// take reports whether b carries an armed SHA, and disarms it.
func (r *replyLoser) take(b []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, sha := range r.armed {
		if bytes.Contains(b, sha) {
			r.armed = append(r.armed[:i], r.armed[i+1:]...)
			return true
		}
	}
	return false
}

func (r *replyLoser) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &loserConn{Conn: c, r: r}, nil
}

type loserConn struct {
	net.Conn
	r   *replyLoser
	cut atomic.Bool
}

func (c *loserConn) Write(b []byte) (int, error) {
	if c.r.take(b) {
		c.cut.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *loserConn) Read(b []byte) (int, error) {
	if c.cut.Load() {
		time.Sleep(30 * time.Millisecond) // Redis runs the script and answers
		c.Conn.Close()
		c.r.lost.Add(1)
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

// lossyClient returns a lock Client whose go-redis client has the default
// options (retries included) and a replyLoser dialer. Every script is loaded
// first, so that EVALSHA runs the script on the first try.
func lossyClient(t *testing.T) (*lock.Client, *replyLoser, redis.UniversalClient) {
	t.Helper()
	r := &replyLoser{}
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), Dialer: r.dial})
	t.Cleanup(func() { rdb.Close() })
	for _, s := range lock.Scripts() {
		if err := s.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := lock.New(rdb)
	t.Cleanup(func() { c.Close() })
	return c, r, rdb
}

// owners returns the owners and hold counts of key's lock.
func owners(t *testing.T, ctx context.Context, c *lock.Client, key string) map[string]int64 {
	t.Helper()
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return info.Owners
}

func wantLost(t *testing.T, r *replyLoser) {
	t.Helper()
	if r.lost.Load() == 0 {
		t.Fatal("no reply was lost: the fault did not happen")
	}
}

// TestLostReplyFreshAcquisition: the acquisition runs twice; the second
// run must not count a second level that no lease owns.
func TestLostReplyFreshAcquisition(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c, r, _ := lossyClient(t)
	key := uniqueKey(t)
	r.arm("acquire.lua")
	l := mustObtain(t, ctx, c, key)
	wantLost(t, r)
	owner := l.(interface{ Owner() string }).Owner()
	if got := owners(t, ctx, c, key); got[owner] != 1 {
		t.Fatalf("after one Obtain whose reply was lost: %v, want %s: 1", got, owner)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := owners(t, ctx, c, key); len(got) != 0 {
		t.Fatalf("after the only lease was released: held by %v", got)
	}
}

// TestLostReplyReentry: the same for a re-entry.
func TestLostReplyReentry(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), lock.NewOwner())
	owner, _ := lock.OwnerFrom(ctx)
	c, r, _ := lossyClient(t)
	key := uniqueKey(t)
	outer := mustObtain(t, ctx, c, key)
	r.arm("acquire.lua")
	inner := mustObtain(t, ctx, c, key)
	wantLost(t, r)
	if inner.Token() != outer.Token() {
		t.Fatalf("re-entry token %d, want the hold's %d", inner.Token(), outer.Token())
	}
	if got := owners(t, ctx, c, key); got[owner] != 2 {
		t.Fatalf("after two levels: %v, want %s: 2", got, owner)
	}
	for _, l := range []lock.Lease{inner, outer} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if got := owners(t, ctx, c, key); len(got) != 0 {
		t.Fatalf("after both leases were released: held by %v", got)
	}
}

// TestLostReplyRelease: the outermost release runs twice; it freed the
// lock, so Release must not answer ErrNotHeld.
func TestLostReplyRelease(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c, r, _ := lossyClient(t)
	key := uniqueKey(t)
	l := mustObtain(t, ctx, c, key)
	r.arm("release.lua")
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release whose reply was lost and resent: %v, want nil (it released the lock)", err)
	}
	wantLost(t, r)
	if got := owners(t, ctx, c, key); len(got) != 0 {
		t.Fatalf("after Release: held by %v", got)
	}
}

// TestLostReplyHandoff: the local line's hand-off runs twice. The releaser
// must see success, the next in line must hold exactly one level, and the
// lock must be free once both released.
func TestLostReplyHandoff(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c, r, _ := lossyClient(t)
	key := uniqueKey(t)
	first := mustObtain(t, ctx, c, key)
	next := make(chan lock.Lease, 1)
	go func() {
		l, err := c.Obtain(ctx, key)
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	time.Sleep(100 * time.Millisecond) // the second goroutine lines up behind the first
	r.arm("handoff.lua")
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release that handed over, whose reply was lost and resent: %v, want nil", err)
	}
	wantLost(t, r)
	second := <-next
	if second == nil {
		t.FailNow()
	}
	if second.Token() <= first.Token() {
		t.Fatalf("token %d after %d", second.Token(), first.Token())
	}
	owner := second.(interface{ Owner() string }).Owner()
	if got := owners(t, ctx, c, key); len(got) != 1 || got[owner] != 1 {
		t.Fatalf("after the hand-off: %v, want %s: 1", got, owner)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if got := owners(t, ctx, c, key); len(got) != 0 {
		t.Fatalf("after both released: held by %v", got)
	}
}

// TestLostReplyRenewAndLeave: renew.lua and leave.lua run twice without
// harm: the hold stays held and renewed, a waiter that left is gone.
func TestLostReplyRenewAndLeave(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c, r, _ := lossyClient(t)
	key := uniqueKey(t)
	l := mustObtain(t, ctx, c, key, lock.WithTTL(300*time.Millisecond))
	r.arm("renew.lua")
	time.Sleep(400 * time.Millisecond) // past a renewal, and past the TTL
	wantLost(t, r)
	select {
	case <-l.Lost():
		t.Fatal("lease lost after a renewal whose reply was lost and resent")
	default:
	}
	waiter, r2, _ := lossyClient(t) // another client: its waiter queues in Redis
	wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	r2.arm("leave.lua")
	if _, err := waiter.Obtain(wctx, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Obtain of a held lock: %v", err)
	}
	cancel()
	wantLost(t, r2)
	other := newClient(t, nil)
	info, err := other.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Waiters) != 0 || !info.Held() {
		t.Fatalf("after the waiter left: %+v", info)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
