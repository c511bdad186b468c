package lock_test

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
)

// shared is the Redis server of the tests that do not break their server,
// and of the examples.
var shared *testserver.Redis

// serverRun starts the shared server around the tests, so that goleak checks
// for leaks after it is gone.
type serverRun struct{ m *testing.M }

func (r serverRun) Run() int {
	var err error
	if shared, err = testserver.NewRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.Close()
	// The examples connect as a user's program would, to an address from
	// its environment.
	os.Setenv("REDIS_ADDR", shared.Addr())
	return r.m.Run()
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(serverRun{m}) }

// uniqueKey returns a key no other test uses.
func uniqueKey(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + ":" + hex.EncodeToString(b)
}

// newClient returns a lock client on srv's Redis (the shared one if srv is
// nil); both are closed when the test ends.
func newClient(t testing.TB, srv interface {
	Client(testing.TB) redis.UniversalClient
}, opts ...lock.ClientOption) *lock.Client {
	t.Helper()
	if srv == nil {
		srv = shared
	}
	c := lock.New(srv.Client(t), opts...)
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustObtain obtains key or fails the test.
func mustObtain(t testing.TB, ctx context.Context, c lock.Locker, key string, opts ...lock.Option) lock.Lease {
	t.Helper()
	l, err := c.Obtain(ctx, key, opts...)
	if err != nil {
		t.Fatalf("Obtain(%q): %v", key, err)
	}
	return l
}

// waitClosed fails the test unless ch closes within d.
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

// testserverRedis starts a Redis server of the test's own.
func testserverRedis(t testing.TB) *testserver.Redis {
	t.Helper()
	return testserver.StartRedis(t)
}
