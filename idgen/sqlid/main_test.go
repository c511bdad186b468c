package sqlid_test

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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/idgen/sqlid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// The servers of the tests and examples: one MariaDB and one PostgreSQL for
// the whole package. The fault tests break them (tests run one at a time)
// and start them again.
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

// backend is one database under test.
type backend struct {
	name    string
	dialect sqlid.Dialect
}

var backends = []backend{{"MariaDB", sqlid.MySQL}, {"Postgres", sqlid.Postgres}}

// forEach runs f as a subtest for each backend.
func forEach(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

type server interface {
	Kill()
	Pause() error
	Resume() error
	Start() error
	Restart() error
}

func (b backend) server() server {
	if b.dialect == sqlid.MySQL {
		return maria
	}
	return pg
}

// keepRunning makes sure the shared server runs when the test ends.
func keepRunning(t *testing.T, s server) {
	t.Cleanup(func() {
		s.Resume()
		if err := s.Start(); err != nil {
			t.Errorf("starting the server again: %v", err)
		}
	})
}

// openDB opens a pool with the driver's default options on b's shared
// server (a "process" of its own), closed when the test ends.
func (b backend) openDB(t testing.TB) *sql.DB {
	t.Helper()
	if b.dialect == sqlid.MySQL {
		return openDB(t, "mysql", maria.DSN())
	}
	return openDB(t, "pgx", pg.DSN())
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

// quiet is the logger of the tests: the fault tests fail fetches on purpose.
var quiet = sqlid.WithLogger(slog.New(slog.DiscardHandler))

// newLeaf returns Leaf generators on db over a table of the test's own,
// created, closed when the test ends.
func newLeaf(t testing.TB, db *sql.DB, d sqlid.Dialect, table string, opts ...sqlid.Option) *sqlid.Segments {
	t.Helper()
	s, err := sqlid.NewLeaf(db, d, append([]sqlid.Option{quiet, sqlid.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateTable(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return s
}

// uniqueName returns an identifier no other test uses, for a table or tag.
func uniqueName(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := strings.NewReplacer("/", "_", " ", "_", "-", "_").Replace(strings.ToLower(t.Name()))
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return "t" + strings.TrimLeft(name, "_") + "_" + hex.EncodeToString(b)
}

// ctxT returns a context cancelled when t ends, at the latest after 3 minutes.
func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
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

// increasing fails t unless ids is strictly increasing.
func increasing(t testing.TB, ids []int64) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("not increasing: %d after %d (index %d)", ids[i], ids[i-1], i)
		}
	}
}

// draw takes n IDs from g, failing t on an error.
func draw(t testing.TB, ctx context.Context, g sqlid.Generator, n int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		id, err := g.Next(ctx)
		if err != nil {
			t.Fatalf("Next #%d: %v", i, err)
		}
		ids[i] = id
	}
	return ids
}

// waitFor polls cond until it holds, failing t after 30 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
