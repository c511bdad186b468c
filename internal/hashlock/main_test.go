package hashlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
)

// shared is the Redis server of the tests.
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

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
