package sqllock_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/sqllock"
)

// The servers of the tests that do not break their server, and of the
// examples: one MariaDB and one PostgreSQL for the whole package.
var (
	maria *testserver.MariaDB
	pg    *testserver.Postgres
)

type serverRun struct{ m *testing.M }

func (r serverRun) Run() int {
	var err error
	if maria, err = testserver.NewMariaDB(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer maria.Close()
	if pg, err = testserver.NewPostgres(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pg.Close()
	// The examples connect as a user's program would, to a DSN from its
	// environment.
	os.Setenv("MYSQL_DSN", maria.DSN())
	os.Setenv("POSTGRES_DSN", pg.DSN())
	if err := createTables(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return r.m.Run()
}

func TestMain(m *testing.M) {
	// go-sql-driver logs the connections it finds broken; the fault tests
	// break many.
	mysql.SetLogger(log.New(io.Discard, "", 0))
	goleak.VerifyTestMain(serverRun{m},
		// database/sql's connection opener lives as long as its *sql.DB.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// createTables makes the default tables on both servers.
func createTables() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []struct{ driver, dsn string }{{"mysql", maria.DSN()}, {"pgx", pg.DSN()}} {
		db, err := sql.Open(s.driver, s.dsn)
		if err != nil {
			return err
		}
		d := sqllock.MySQL
		if s.driver == "pgx" {
			d = sqllock.Postgres
		}
		var session *sqllock.Client
		if d == sqllock.MySQL {
			session, err = sqllock.NewMySQL(db)
		} else {
			session, err = sqllock.NewPostgres(db)
		}
		if err != nil {
			return err
		}
		table, err := sqllock.NewLeaseTable(db, d)
		if err != nil {
			return err
		}
		for _, c := range []*sqllock.Client{session, table} {
			if err := c.CreateTable(ctx); err != nil {
				return err
			}
		}
		db.Close()
	}
	return nil
}

// backend is one of the four SQL lockers under test.
type backend struct {
	name    string
	dialect sqllock.Dialect
	lease   bool // the lease table; else a session lock
}

var backends = []backend{
	{"MySQL", sqllock.MySQL, false},
	{"Postgres", sqllock.Postgres, false},
	{"MySQLLeaseTable", sqllock.MySQL, true},
	{"PostgresLeaseTable", sqllock.Postgres, true},
}

// forEach runs f as a subtest for each backend.
func forEach(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// driverDSN returns the driver name and DSN of b's shared server, with
// params.
func (b backend) driverDSN(params ...string) (string, string) {
	if b.dialect == sqllock.MySQL {
		return "mysql", maria.DSN(params...)
	}
	return "pgx", pg.DSN(params...)
}

// openDB opens a pool on b's shared server, closed when the test ends.
func (b backend) openDB(t testing.TB, params ...string) *sql.DB {
	t.Helper()
	driver, dsn := b.driverDSN(params...)
	return openDB(t, driver, dsn)
}

func openDB(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// client returns a Client of b on db (a new pool on the shared server if
// nil), closed when the test ends.
func (b backend) client(t testing.TB, db *sql.DB, opts ...sqllock.Option) *sqllock.Client {
	t.Helper()
	if db == nil {
		db = b.openDB(t)
	}
	// Quiet by default: the fault tests lose leases on purpose.
	opts = append([]sqllock.Option{sqllock.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	c, err := b.newClient(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (b backend) newClient(db *sql.DB, opts ...sqllock.Option) (*sqllock.Client, error) {
	switch {
	case b.lease:
		return sqllock.NewLeaseTable(db, b.dialect, opts...)
	case b.dialect == sqllock.MySQL:
		return sqllock.NewMySQL(db, opts...)
	default:
		return sqllock.NewPostgres(db, opts...)
	}
}

// uniqueKey returns a key no other test uses.
func uniqueKey(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	return strings.NewReplacer("/", ".", " ", "_").Replace(strings.ToLower(t.Name())) + ":" + hex.EncodeToString(b)
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

// waitClosed fails the test unless ch closes within d, and returns how long
// it took.
func waitClosed(t testing.TB, ch <-chan struct{}, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ch:
		return time.Since(start)
	case <-time.After(d):
		// Both may be ready when this goroutine ran late (a starved
		// host): select then picks either. A channel closed by now
		// may have closed in time.
		select {
		case <-ch:
			return time.Since(start)
		default:
			t.Fatalf("%s: not within %v", what, d)
		}
	}
	return 0
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
