package redlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

// shared are the five masters of the tests that do not break them, and of
// the examples.
var shared []*testserver.Redis

type serverRun struct{ m *testing.M }

func (r serverRun) Run() int {
	var err error
	if shared, err = testserver.NewRedisMasters(5); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		for _, s := range shared {
			s.Close()
		}
	}()
	// The examples connect as a user's program would, to addresses from its
	// environment.
	os.Setenv("REDLOCK_ADDRS", strings.Join(addrsOf(shared), ","))
	return r.m.Run()
}

// go-redis retries the dial of a dead server in a goroutine that sleeps a
// second before it sees that its pool was closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(serverRun{m},
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// uniqueKey returns a key no other test uses.
func uniqueKey(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + ":" + hex.EncodeToString(b)
}

// dial returns go-redis clients for addrs, built as redlock needs them
// (ContextTimeoutEnabled), closed when the test ends.
func dial(t testing.TB, addrs ...string) []redis.UniversalClient {
	t.Helper()
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs
}

func addrsOf(rs []*testserver.Redis) []string {
	a := make([]string, len(rs))
	for i, r := range rs {
		a[i] = r.Addr()
	}
	return a
}

// testNodeTimeout is the node timeout of the tests' clients unless a test
// sets its own (a later option wins): the default, 20 ms, suits a quiet
// host, and make test runs every package, the vet and the chaos checker at
// once on 2 cores, where a master's answer can take longer than that and a
// test about something else would fail on a missed quorum. The tests that
// time the node timeout itself set theirs.
const testNodeTimeout = 250 * time.Millisecond

// newClient returns a Client with go-redis clients of its own on rs (the
// shared masters if nil), as a separate process would have; all are closed
// when the test ends. Its node timeout is testNodeTimeout unless opts set one.
func newClient(t testing.TB, rs []*testserver.Redis, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	if rs == nil {
		rs = shared
	}
	c, err := redlock.New(dial(t, addrsOf(rs)...), append([]redlock.Option{redlock.WithNodeTimeout(testNodeTimeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustObtain(t testing.TB, ctx context.Context, c lock.Locker, key string, opts ...lock.Option) lock.Lease {
	t.Helper()
	l, err := c.Obtain(ctx, key, opts...)
	if err != nil {
		t.Fatalf("Obtain(%q): %v", key, err)
	}
	return l
}

func waitClosed(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		// Both may be ready when this goroutine ran late (a starved
		// host): select then picks either. A channel closed by now
		// may have closed in time.
		select {
		case <-ch:
		default:
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// countedClient returns a Client over the first n shared masters whose
// script calls evals counts. Every script is loaded first, so that no
// NOSCRIPT fallback is counted.
func countedClient(t testing.TB, n int, evals *testserver.EvalCounter, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	ctx := context.Background()
	rdbs := dial(t, addrsOf(shared[:n])...)
	for _, r := range rdbs {
		if err := redlock.Preload(ctx, r); err != nil {
			t.Fatal(err)
		}
		r.AddHook(evals)
	}
	c, err := redlock.New(rdbs, append([]redlock.Option{redlock.WithNodeTimeout(testNodeTimeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
