package redisid_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// shared is the Redis server of the tests and examples that need no faults.
var shared *testserver.Redis

func TestMain(m *testing.M) {
	r, err := testserver.NewRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisid tests:", err)
		os.Exit(1)
	}
	shared = r
	// The examples connect as a user's program would, to an address from
	// its environment.
	os.Setenv("REDIS_ADDR", r.Addr())
	code := m.Run()
	r.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var keySeq atomic.Int64

// uniqueKey returns a key no other test uses.
func uniqueKey(t testing.TB) string {
	t.Helper()
	name := strings.NewReplacer("/", "_", "{", "", "}", "").Replace(t.Name())
	return fmt.Sprintf("test:%s:%d", name, keySeq.Add(1))
}

// sharedClient returns a client of the shared server, closed when t ends.
func sharedClient(t testing.TB) redis.UniversalClient {
	t.Helper()
	return shared.Client(t)
}

// noDuplicates sorts ids and fails t on the first value that appears twice.
func noDuplicates(t testing.TB, ids []int64) {
	t.Helper()
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Fatalf("duplicate ID %d (%d IDs)", ids[i], len(ids))
		}
	}
}

// ctxT returns a context cancelled when t ends.
func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}
