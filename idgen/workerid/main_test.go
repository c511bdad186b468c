package workerid_test

import (
	"fmt"
	"os"
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
	code := m.Run()
	zkServer.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
