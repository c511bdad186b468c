package contract_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/zklock"
)

var (
	single  *testserver.Redis
	masters []*testserver.Redis
	zkSrv   *testserver.ZooKeeper
)

type serverRun struct{ m *testing.M }

func (r serverRun) Run() int {
	var err error
	if single, err = testserver.NewRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer single.Close()
	if masters, err = testserver.NewRedisMasters(3); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		for _, m := range masters {
			m.Close()
		}
	}()
	if zkSrv, err = testserver.NewZooKeeper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer zkSrv.Close()
	stopSQL, err := startSQL()
	defer stopSQL()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return r.m.Run()
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(serverRun{m},
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		// database/sql's connection opener lives as long as its *sql.DB.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// closer is what every coordkit client offers besides Locker.
type closer interface {
	lock.Locker
	Close() error
}

// backend is one Locker implementation under the same checks.
type backend struct {
	name string
	// open returns a new client, closed when the test ends (Close may be
	// called before).
	open func(t *testing.T) closer
	// reentrant: an owner that holds a key takes it again at once.
	reentrant bool
	// ttl: the call's TTL options apply (and bad ones are refused).
	ttl bool
	// lose takes key's hold away behind its holder's back; reason is what
	// the lease's loss then matches.
	lose   func(t *testing.T, c closer, key string)
	reason error
}

var keySeq atomic.Int64

func newKey(t *testing.T) string {
	return fmt.Sprintf("contract:%s:%d", strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()), keySeq.Add(1))
}

func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func backends() []backend {
	const ttl = 900 * time.Millisecond // renewed every 300 ms: a loss is seen quickly
	return []backend{
		{
			name: "lock.Client",
			open: func(t *testing.T) closer {
				c := lock.New(redisClient(t, single.Addr()), lock.WithDefaultTTL(ttl))
				t.Cleanup(func() { c.Close() })
				return c
			},
			reentrant: true, ttl: true, reason: lock.ErrNotHeld,
			lose: func(t *testing.T, _ closer, key string) {
				mustDel(t, single, lock.DefaultPrefix+"{"+key+"}")
			},
		},
		{
			name: "lock.Simple",
			open: func(t *testing.T) closer {
				c := lock.NewSimple(redisClient(t, single.Addr()), lock.WithDefaultTTL(ttl))
				t.Cleanup(func() { c.Close() })
				return c
			},
			reentrant: false, ttl: true, reason: lock.ErrNotHeld,
			lose: func(t *testing.T, _ closer, key string) {
				mustDel(t, single, lock.DefaultPrefix+"simple:{"+key+"}")
			},
		},
		{
			name: "redlock.Client",
			open: func(t *testing.T) closer {
				var cs []*redis.Client
				for _, m := range masters {
					cs = append(cs, redisClient(t, m.Addr()))
				}
				c, err := redlock.New(redlock.Masters(cs...), redlock.WithDefaultTTL(ttl), redlock.WithNodeTimeout(250*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			},
			reentrant: true, ttl: true, reason: lock.ErrNotHeld,
			lose: func(t *testing.T, _ closer, key string) {
				n, err := hashlock.NewNode(redlock.DefaultPrefix)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range masters {
					// A quorum grants at once; a master that answers later
					// takes its level then: delete once it has.
					waitExists(t, m, n.Keys(key).Lock)
					mustDel(t, m, n.Keys(key).Lock)
				}
			},
		},
		{
			name: "zklock.Client",
			open: func(t *testing.T) closer {
				conn := zkSrv.DialT(t, 3*time.Second, nil)
				t.Cleanup(conn.Close)
				c, err := zklock.New(conn.Conn, zklock.WithRoot("/contract"), zklock.WithSessionTimeout(3*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return zkCloser{c, conn}
			},
			reentrant: true, ttl: false, reason: zklock.ErrSessionExpired,
			lose: func(t *testing.T, c closer, _ string) {
				if err := c.(zkCloser).conn.Expire(); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
}

// zkCloser keeps the test connection beside the zklock Client, for lose.
type zkCloser struct {
	*zklock.Client
	conn *testserver.ZKConn
}

func mustDel(t *testing.T, r *testserver.Redis, key string) {
	t.Helper()
	n, err := r.Client(t).Del(context.Background(), key).Result()
	if err != nil || n != 1 {
		t.Fatalf("DEL %s: %d, %v (want 1 key deleted)", key, n, err)
	}
}

// waitExists waits, up to 2 s, until key exists on r.
func waitExists(t *testing.T, r *testserver.Redis, key string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n, err := r.Client(t).Exists(context.Background(), key).Result()
		if err == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not on %s 2 s after the lock was obtained: %d, %v", key, r.Addr(), n, err)
		}
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestContract runs each check against each backend.
func TestContract(t *testing.T) {
	checks := []struct {
		name string
		run  func(t *testing.T, b backend)
	}{
		{"bad input", checkBadInput},
		{"held elsewhere", checkHeldElsewhere},
		{"release twice", checkReleaseTwice},
		{"re-entry", checkReentry},
		{"status while held", checkStatus},
		{"loss reason", checkLossReason},
		{"close", checkClose},
		{"holder", checkHolder},
	}
	for _, b := range append(backends(), sqlBackends()...) {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range checks {
				t.Run(c.name, func(t *testing.T) { c.run(t, b) })
			}
		})
	}
}

func checkBadInput(t *testing.T, b backend) {
	ctx := ctxFor(t, 10*time.Second)
	c := b.open(t)
	for _, try := range []bool{false, true} {
		var err error
		if try {
			_, err = c.TryObtain(ctx, "")
		} else {
			_, err = c.Obtain(ctx, "")
		}
		if !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("empty key (try=%v): %v, want lock.ErrInvalid", try, err)
		}
	}
	if b.ttl {
		for _, d := range []time.Duration{0, -time.Second} {
			_, err := c.TryObtain(ctx, newKey(t), lock.WithTTL(d))
			if !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("WithTTL(%v): %v, want lock.ErrInvalid", d, err)
			}
		}
	}
	if err := lock.Do(ctx, c, newKey(t), nil); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Do with a nil function: %v, want lock.ErrInvalid", err)
	}
}

func checkHeldElsewhere(t *testing.T, b backend) {
	ctx := ctxFor(t, 10*time.Second)
	key := newKey(t)
	a, other := b.open(t), b.open(t)
	l, err := a.Obtain(lock.WithOwner(ctx, "owner-a"), key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := other.TryObtain(lock.WithOwner(ctx, "owner-b"), key); !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("TryObtain of a key held by another owner: %v, want lock.ErrNotObtained", err)
	}
	wctx, cancel := context.WithTimeout(lock.WithOwner(ctx, "owner-b"), 200*time.Millisecond)
	defer cancel()
	if _, err := other.Obtain(wctx, key); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Obtain until ctx's deadline: %v, want lock.ErrNotObtained and context.DeadlineExceeded", err)
	}
}

func checkReleaseTwice(t *testing.T, b backend) {
	ctx := ctxFor(t, 10*time.Second)
	c := b.open(t)
	l, err := c.Obtain(ctx, newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Release: %v, want lock.ErrNotHeld", err)
	}
}

func checkReentry(t *testing.T, b backend) {
	ctx := ctxFor(t, 10*time.Second)
	c := b.open(t)
	key := newKey(t)
	err := lock.Do(ctx, c, key, func(ctx context.Context) error {
		if !b.reentrant {
			// Documented as not reentrant: the same owner is refused.
			if _, err := c.TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
				return fmt.Errorf("TryObtain by the holder of a non-reentrant lock: %v, want lock.ErrNotObtained", err)
			}
			return nil
		}
		var outer int64
		return lock.Do(ctx, c, key, func(ctx context.Context) error {
			inner, err := c.TryObtain(ctx, key)
			if err != nil {
				return fmt.Errorf("re-entry by the holder: %w", err)
			}
			defer inner.Release(ctx)
			if outer = inner.Token(); outer == 0 {
				return errors.New("re-entry: zero token")
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func checkStatus(t *testing.T, b backend) {
	ctx := ctxFor(t, 10*time.Second)
	c := b.open(t)
	l, err := c.Obtain(ctx, newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	s, ok := l.(lock.LeaseStatus)
	if !ok {
		t.Fatalf("%T does not implement lock.LeaseStatus", l)
	}
	if err := s.Err(); err != nil || lock.LostCause(l) != nil {
		t.Errorf("Err of a held lease: %v", err)
	}
	if u := s.Until(); !u.After(time.Now()) {
		t.Errorf("Until of a held lease: %v, not in the future", u)
	}
}

func checkLossReason(t *testing.T, b backend) {
	ctx := ctxFor(t, 20*time.Second)
	c := b.open(t)
	key := newKey(t)
	var cause error
	err := lock.Do(ctx, c, key, func(ctx context.Context) error {
		b.lose(t, c, key)
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(15 * time.Second):
			return errors.New("the loss was not reported within 15 s")
		}
	})
	if !errors.Is(cause, lock.ErrLockLost) || !errors.Is(cause, b.reason) {
		t.Errorf("cause of Do's ctx: %v, want lock.ErrLockLost and %v", cause, b.reason)
	}
	if !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, b.reason) {
		t.Errorf("Do: %v, want lock.ErrLockLost and %v", err, b.reason)
	}
}

func checkClose(t *testing.T, b backend) {
	ctx := ctxFor(t, 10*time.Second)
	c := b.open(t)
	key := newKey(t)
	var cause error
	var held lock.Lease
	err := lock.Do(ctx, c, key, func(ctx context.Context) error {
		var err error
		if held, err = c.TryObtain(ctx, key+":2"); err != nil {
			return err
		}
		if err := c.Close(); err != nil {
			return fmt.Errorf("Close: %w", err)
		}
		<-ctx.Done()
		cause = context.Cause(ctx)
		return nil
	})
	if !errors.Is(cause, lock.ErrLockLost) || !errors.Is(cause, lock.ErrClosed) {
		t.Errorf("cause of Do's ctx at Close: %v, want lock.ErrLockLost and lock.ErrClosed", cause)
	}
	if !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Do at Close: %v, want lock.ErrLockLost and lock.ErrClosed", err)
	}
	if held != nil {
		if err := lock.LostCause(held); !errors.Is(err, lock.ErrClosed) {
			t.Errorf("LostCause of another lease at Close: %v, want lock.ErrClosed", err)
		}
		if u := held.(lock.LeaseStatus).Until(); !u.IsZero() {
			t.Errorf("Until of a lost lease: %v, want the zero Time", u)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, try := range []bool{false, true} {
		var err error
		if try {
			_, err = c.TryObtain(ctx, newKey(t))
		} else {
			_, err = c.Obtain(ctx, newKey(t))
		}
		if !errors.Is(err, lock.ErrClosed) {
			t.Errorf("after Close (try=%v): %v, want lock.ErrClosed", try, err)
		}
	}
}

// holderOf is the Holder method of lock.Client, redlock.Client and
// zklock.Client (not lock.Simple, whose key holds a random value).
type holderOf interface {
	Holder(ctx context.Context, key string) (owner string, token int64, err error)
}

func checkHolder(t *testing.T, b backend) {
	ctx := ctxFor(t, 10*time.Second)
	c := b.open(t)
	h, ok := c.(holderOf)
	if !ok {
		if b.name != "lock.Simple" {
			t.Fatalf("%s has no Holder method", b.name)
		}
		return
	}
	key := newKey(t)
	if owner, token, err := h.Holder(ctx, key); err != nil || owner != "" || token != 0 {
		t.Fatalf("Holder of a free key = %q, %d, %v", owner, token, err)
	}
	l, err := b.open(t).Obtain(lock.WithOwner(ctx, "alice"), key)
	if err != nil {
		t.Fatal(err)
	}
	owner, token, err := h.Holder(ctx, key)
	if err != nil || owner != "alice" || token != l.Token() {
		t.Fatalf("Holder while alice holds = %q, %d, %v; want alice, %d", owner, token, err, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if owner, _, err := h.Holder(ctx, key); err != nil || owner != "" {
		t.Fatalf("Holder after the release = %q, %v", owner, err)
	}
	if _, _, err := h.Holder(ctx, ""); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Holder of an empty key: %v, want lock.ErrInvalid", err)
	}
}
