package workerid_test

import (
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
)

// zkServer is one ZooKeeper for the package's tests (a JVM start is slow).
var zkServer *testserver.ZooKeeper

// One MariaDB and one PostgreSQL for the package's tests; each test makes
// tables of its own (newSQLTable). Fault tests that stop a server start it
// again before they end.
var (
	maria *testserver.MariaDB
	pg    *testserver.Postgres
)

func TestMain(m *testing.M) {
	// go-sql-driver logs the connections it finds broken; the fault tests
	// break many.
	mysql.SetLogger(log.New(io.Discard, "", 0))
	if spec := os.Getenv(pauseHolderEnv); spec != "" { // a holder process of TestPausedHolderIssuesNothing
		os.Exit(pauseHolder(spec))
	}
	var err error
	if zkServer, err = testserver.NewZooKeeper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if maria, err = testserver.NewMariaDB(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		zkServer.Close()
		os.Exit(1)
	}
	if pg, err = testserver.NewPostgres(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		maria.Close()
		zkServer.Close()
		os.Exit(1)
	}
	// The examples connect as a user's program would, to servers from its
	// environment: a Redis of their own, and the package's ZooKeeper,
	// MariaDB and PostgreSQL.
	examples, err := testserver.NewRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", examples.Addr())
	os.Setenv("ZK_SERVERS", strings.Join(zkServer.Servers(), ","))
	os.Setenv("MYSQL_DSN", maria.DSN())
	os.Setenv("POSTGRES_DSN", pg.DSN())
	code := m.Run()
	examples.Close()
	pg.Close()
	maria.Close()
	zkServer.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
