package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// server is the package's shared etcd member; tests that kill or pause it
// start their own.
var server *testserver.Etcd

func TestMain(m *testing.M) {
	e, err := testserver.NewEtcd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdlock tests:", err)
		os.Exit(1)
	}
	server = e
	// The examples connect as a user's program would, to servers from its
	// environment.
	os.Setenv("ETCD_ENDPOINTS", strings.Join(e.Endpoints(), ","))
	code := m.Run()
	e.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// ttl is the tests' lease TTL: keep-alives every 333 ms, a loss reported
// 1.33 s after the send of the last answered one.
const ttl = 2 * time.Second

// dial returns an etcd client of endpoints, closed when the test ends.
func dial(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// prefix is the test's own key prefix.
func prefix(t *testing.T) string {
	return "/test/" + strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
}

// newClient returns a Client on cli with the test's prefix and ttl, closed
// when the test ends (before cli).
func newClient(t *testing.T, cli *clientv3.Client, opts ...etcdlock.Option) *etcdlock.Client {
	t.Helper()
	c, err := etcdlock.New(cli, append([]etcdlock.Option{etcdlock.WithPrefix(prefix(t)), etcdlock.WithTTL(ttl), withTestLogger(t)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lossBound is how long after a fault the tests wait for Lost: the lease's
// window (2T/3 from the send of the last answered keep-alive) and slack
// for a loaded host. The tests log the time it took.
const lossBound = 3 * ttl / 2

// withTestLogger logs to t's output: the Client is closed before t ends,
// and some tests run in parallel, so logtest.Capture (the current test's
// output) could name the wrong one.
func withTestLogger(t *testing.T) etcdlock.Option {
	return etcdlock.WithLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})))
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func obtain(t *testing.T, l lock.Locker, ctx context.Context, key string) lock.Lease {
	t.Helper()
	lease, err := l.Obtain(ctx, key)
	if err != nil {
		t.Fatalf("Obtain %q: %v", key, err)
	}
	return lease
}

func release(t *testing.T, lease lock.Lease) {
	t.Helper()
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("Release %q: %v", lease.Key(), err)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// holdKeys returns the hold keys under key's prefix, as raw etcd sees them.
func holdKeys(t *testing.T, cli *clientv3.Client, key string) []string {
	t.Helper()
	resp, err := cli.Get(ctxFor(t, 5*time.Second), prefix(t)+"/"+key+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, kv := range resp.Kvs {
		ks = append(ks, string(kv.Key))
	}
	return ks
}

type result struct {
	lease lock.Lease
	err   error
	at    time.Time
	// prevLost: the lease given to obtainAfter was reported lost when
	// Obtain returned.
	prevLost bool
}

// obtainAsync runs Obtain in a goroutine; the test must receive its result.
func obtainAsync(ctx context.Context, l lock.Locker, key string) <-chan result {
	return obtainAfter(ctx, l, key, nil)
}

// obtainAfter is obtainAsync that also notes, as soon as Obtain returns,
// whether prev's Lost was closed then: an order that no timestamp taken
// by another goroutine can get wrong.
func obtainAfter(ctx context.Context, l lock.Locker, key string, prev lock.Lease) <-chan result {
	ch := make(chan result, 1)
	go func() {
		lease, err := l.Obtain(ctx, key)
		r := result{lease: lease, err: err, at: time.Now()}
		r.prevLost = prev != nil && closed(prev.Lost())
		ch <- r
	}()
	return ch
}

func await(t *testing.T, ch <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("no result within %v", within)
		return result{}
	}
}

func wantLost(t *testing.T, lease lock.Lease, within time.Duration, reason error) {
	t.Helper()
	t.Helper()
	select {
	case <-lease.Lost():
	case <-time.After(within):
		if !closed(lease.Lost()) {
			t.Fatalf("lease of %q not reported lost within %v", lease.Key(), within)
		}
	}
	if err := lock.LostCause(lease); !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, reason) {
		t.Fatalf("LostCause: %v, want lock.ErrLockLost and %v", err, reason)
	}
}
