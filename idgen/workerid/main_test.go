package workerid_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
)

// zkServer is one ZooKeeper for the package's tests (a JVM start is slow).
var zkServer *testserver.ZooKeeper

func TestMain(m *testing.M) {
	if spec := os.Getenv(pauseHolderEnv); spec != "" { // a holder process of TestPausedHolderIssuesNothing
		os.Exit(pauseHolder(spec))
	}
	var err error
	if zkServer, err = testserver.NewZooKeeper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The examples connect as a user's program would, to servers from its
	// environment: a Redis of their own, and the package's ZooKeeper.
	examples, err := testserver.NewRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", examples.Addr())
	os.Setenv("ZK_SERVERS", strings.Join(zkServer.Servers(), ","))
	code := m.Run()
	examples.Close()
	zkServer.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
