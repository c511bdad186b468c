package redisfn_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
)

// shared is the Redis server of the tests that do not flush or restart it.
var shared *testserver.Redis

type serverRun struct{ m *testing.M }

func (r serverRun) Run() int {
	var err error
	if shared, err = testserver.NewRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.Close()
	return r.m.Run()
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(serverRun{m}) }

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
