package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

// plainMasters returns the five shared masters behind fault proxies, with
// go-redis clients as users build them: an address and nothing else (no
// ContextTimeoutEnabled: a silent master's read ends at the 3 s
// ReadTimeout, and go-redis then sends the command again).
func plainMasters(t *testing.T) ([]*testserver.Proxy, []*redis.Client) {
	t.Helper()
	proxies := make([]*testserver.Proxy, len(shared))
	clients := make([]*redis.Client, len(shared))
	for i, s := range shared {
		proxies[i] = testserver.StartProxy(t, s.Addr())
		c := redis.NewClient(&redis.Options{Addr: proxies[i].Addr()})
		t.Cleanup(func() { c.Close() })
		clients[i] = c
	}
	return proxies, clients
}

// plainLocker returns a Redlock over plainMasters (TTL 30 s), closed when
// the test ends if the test has not closed it.
func plainLocker(t *testing.T, nodeTimeout time.Duration) ([]*testserver.Proxy, *redlock.Client) {
	t.Helper()
	proxies, clients := plainMasters(t)
	c, err := redlock.New(redlock.Masters(clients...), redlock.WithNodeTimeout(nodeTimeout), redlock.WithDefaultTTL(30*time.Second))
	if err != nil {
		t.Fatalf("New with plain clients: %v", err)
	}
	return proxies, c
}

// heldOn returns the masters (direct, not through the proxies) on which
// key's lock hash exists.
func heldOn(t *testing.T, ctx context.Context, key string) []int {
	t.Helper()
	lockKey := mustNode(t).Keys(key).Lock
	var on []int
	for i, s := range shared {
		n, err := s.Client(t).Exists(ctx, lockKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			on = append(on, i)
		}
	}
	return on
}

func mustNode(t *testing.T) hashlock.Node {
	t.Helper()
	n, err := hashlock.NewNode(redlock.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFree waits until key's lock hash is gone from every master, which
// must happen long before its TTL (30 s in these tests).
func waitFree(t *testing.T, ctx context.Context, key string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		on := heldOn(t, ctx, key)
		if len(on) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock is still held on masters %v %v after the failed attempt (TTL 30 s): what they took was not given back", on, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPlainClients: New takes plain clients (Masters for a []*redis.Client),
// and every round enforces the node timeout itself.
func TestPlainClients(t *testing.T) {
	const nodeTimeout = 50 * time.Millisecond
	// A round that waited for a silent master's client would take its 3 s
	// ReadTimeout; one that enforces the node timeout, about 50 ms. 2 s,
	// not 1 s: a starved host (load 23 on 2 cores) stalls for a second.
	const bound = 2 * time.Second

	t.Run("minority silent", func(t *testing.T) {
		ctx := ctxTimeout(t, 30*time.Second)
		key := uniqueKey(t)
		proxies, c := plainLocker(t, nodeTimeout)
		defer c.Close()
		proxies[3].SetBlackhole(true)
		proxies[4].SetBlackhole(true)
		defer proxies[3].Reset() // before Close, which waits for the calls in flight
		defer proxies[4].Reset()
		for range 3 {
			begin := time.Now()
			err := lock.Do(ctx, c, key, func(context.Context) error { return nil })
			if err != nil {
				t.Fatalf("Do with 2 of 5 masters silent: %v", err)
			}
			if d := time.Since(begin); d > bound {
				t.Fatalf("Do with 2 of 5 masters silent took %v", d)
			}
		}
	})

	t.Run("majority answers late", func(t *testing.T) {
		ctx := ctxTimeout(t, 30*time.Second)
		key := uniqueKey(t)
		proxies, c := plainLocker(t, nodeTimeout)
		defer c.Close()
		// Three masters run the scripts at once, but their answers are
		// held back until the attempt has returned.
		for _, p := range proxies[2:] {
			p.SetBlackholeToClient(true)
		}
		begin := time.Now()
		_, err := c.TryObtain(ctx, key)
		d := time.Since(begin)
		for _, p := range proxies[2:] {
			p.Reset()
		}
		if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("TryObtain with 3 of 5 masters silent: %v, want ErrNotObtained, ErrNoQuorum and DeadlineExceeded", err)
		}
		if d > bound {
			t.Fatalf("TryObtain with 3 of 5 masters silent took %v", d)
		}
		waitFree(t, ctx, key, 2*time.Second)
		l, err := c.TryObtain(ctx, key)
		if err != nil {
			t.Fatalf("TryObtain after the masters answered again: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("majority hears late", func(t *testing.T) {
		// The acquisitions and the failed round's releases are both held
		// on their way to three masters, and arrive when the link heals,
		// in either order: where a release came first, the acquisition's
		// late answer must give back the level it took.
		ctx := ctxTimeout(t, 30*time.Second)
		key := uniqueKey(t)
		proxies, c := plainLocker(t, nodeTimeout)
		defer c.Close()
		for _, p := range proxies[2:] {
			p.SetBlackholeToServer(true)
		}
		begin := time.Now()
		_, err := c.TryObtain(ctx, key)
		d := time.Since(begin)
		if !errors.Is(err, redlock.ErrNoQuorum) {
			t.Fatalf("TryObtain with 3 of 5 masters unreachable: %v, want ErrNoQuorum", err)
		}
		if d > bound {
			t.Fatalf("TryObtain with 3 of 5 masters unreachable took %v", d)
		}
		time.Sleep(100 * time.Millisecond) // the failure's releases are on their way too
		for _, p := range proxies[2:] {
			p.Reset()
		}
		waitFree(t, ctx, key, 2*time.Second)
	})
}

// TestPlainClientsCloseWaits: Close while a silent master's calls are still
// running on plain clients (here with a 300 ms ReadTimeout) returns once
// they end, leaving no goroutine of the Client behind (TestMain's goleak
// check), and the lease's Lost is closed.
func TestPlainClientsCloseWaits(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	proxies := make([]*testserver.Proxy, len(shared))
	clients := make([]*redis.Client, len(shared))
	for i, s := range shared {
		proxies[i] = testserver.StartProxy(t, s.Addr())
		c := redis.NewClient(&redis.Options{Addr: proxies[i].Addr(), ReadTimeout: 300 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		clients[i] = c
	}
	c, err := redlock.New(redlock.Masters(clients...), redlock.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	proxies[4].SetBlackhole(true)
	l := mustObtain(t, ctx, c, key)
	begin := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v with master 4 silent", time.Since(begin))
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost not closed after Close")
	}
	proxies[4].Reset()
}
