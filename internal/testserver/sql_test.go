package testserver_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/internal/testserver"
)

// sqlServer is what the SQL servers' tests need of MariaDB and Postgres.
type sqlServer interface {
	Addr() string
	PID() int
	Running() bool
	Kill()
	Pause() error
	Resume() error
	Restart() error
	Start() error
}

type sqlCase struct {
	name   string
	start  func(t *testing.T) (srv sqlServer, driver, dsn string, dsnAt func(addr string) string)
	create string // a table with one integer column v
}

var sqlCases = []sqlCase{
	{
		name: "MariaDB",
		start: func(t *testing.T) (sqlServer, string, string, func(string) string) {
			m := testserver.StartMariaDB(t)
			return m, "mysql", m.DSN("timeout=1s"), func(a string) string { return m.DSNAt(a, "timeout=1s") }
		},
		create: "CREATE TABLE t (v INT NOT NULL) ENGINE=InnoDB",
	},
	{
		name: "PostgreSQL",
		start: func(t *testing.T) (sqlServer, string, string, func(string) string) {
			p := testserver.StartPostgres(t)
			return p, "pgx", p.DSN("connect_timeout=1"), func(a string) string { return p.DSNAt(a, "connect_timeout=1") }
		},
		create: "CREATE TABLE t (v INT NOT NULL)",
	},
}

func openDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// queryV reads t.v within d.
func queryV(db *sql.DB, d time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var v int
	err := db.QueryRowContext(ctx, "SELECT v FROM t").Scan(&v)
	return v, err
}

// TestSQLServers starts each server, writes a row, and checks that Pause,
// Resume, Kill, Start and Restart do what they say, that committed data
// survives a kill, and that the Proxy cuts a connection.
func TestSQLServers(t *testing.T) {
	for _, c := range sqlCases {
		t.Run(c.name, func(t *testing.T) {
			srv, driver, dsn, dsnAt := c.start(t)
			ctx := ctxT(t, 60*time.Second)
			db := openDB(t, driver, dsn)
			if _, err := db.ExecContext(ctx, c.create); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO t (v) VALUES (1)"); err != nil {
				t.Fatal(err)
			}

			// Pause: an open connection (held by conn) gets no answer.
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			var v int
			err = conn.QueryRowContext(qctx, "SELECT v FROM t").Scan(&v)
			cancel()
			if err == nil {
				t.Fatal("a paused server answered")
			}
			conn.Close()
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
			if v, err := queryV(db, 5*time.Second); err != nil || v != 1 {
				t.Fatalf("after Resume: %d, %v", v, err)
			}

			// Kill: a crash; committed data survives Start.
			pid := srv.PID()
			srv.Kill()
			if srv.Running() {
				t.Fatal("running after Kill")
			}
			if _, err := queryV(db, 2*time.Second); err == nil {
				t.Fatal("a killed server answered")
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			if srv.PID() == pid {
				t.Fatal("Start kept the old PID")
			}
			if v, err := queryV(db, 5*time.Second); err != nil || v != 1 {
				t.Fatalf("after Kill and Start: %d, %v", v, err)
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			if v, err := queryV(db, 5*time.Second); err != nil || v != 1 {
				t.Fatalf("after Restart: %d, %v", v, err)
			}

			// Proxy: Cut breaks an open connection; new ones pass.
			px := testserver.StartProxy(t, srv.Addr())
			pdb := openDB(t, driver, dsnAt(px.Addr()))
			pconn, err := pdb.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer pconn.Close()
			if err := pconn.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			px.Cut()
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err = pconn.QueryRowContext(pctx, "SELECT v FROM t").Scan(&v)
			cancel()
			if err == nil {
				t.Fatal("a cut connection answered")
			}
			if v, err := queryV(pdb, 5*time.Second); err != nil || v != 1 {
				t.Fatalf("a new connection through the proxy: %d, %v", v, err)
			}
		})
	}
}

// TestPostgresPauseStopsBackends: PostgreSQL serves each connection from a
// backend process of its own; Pause must stop those too, not only the
// postmaster.
func TestPostgresPauseStopsBackends(t *testing.T) {
	p := testserver.StartPostgres(t)
	ctx := ctxT(t, 30*time.Second)
	db := openDB(t, "pgx", p.DSN())
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = conn.PingContext(qctx)
	cancel()
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		t.Fatal("the backend of an open connection answered while the server was paused")
	}
}

func TestSQLServerMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	// PostgreSQL is also looked up in /usr/lib/postgresql/*/bin, off PATH.
	_, err := testserver.NewMariaDB()
	if !errors.Is(err, testserver.ErrMissingBinary) || !strings.Contains(err.Error(), "apt-get install -y mariadb-server") {
		t.Errorf("NewMariaDB without mariadbd on PATH: %v, want ErrMissingBinary naming apt-get install -y mariadb-server", err)
	}
}

// TestMariaDBTempTablesSurviveAnotherStart starts a second MariaDB while
// the first holds a temporary table: every mariadbd (the one
// mariadb-install-db runs too) deletes the #sql* files of its tmpdir at
// start-up, so servers sharing /tmp lost each other's temporary tables (and
// parallel test processes failed each other's installs, issue 31).
func TestMariaDBTempTablesSurviveAnotherStart(t *testing.T) {
	m := testserver.StartMariaDB(t)
	ctx := ctxT(t, 60*time.Second)
	db := openDB(t, "mysql", m.DSN())
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Aria, as the install's own temporary tables: its files live in tmpdir
	// (InnoDB's live in the data directory).
	if _, err := conn.ExecContext(ctx, "CREATE TEMPORARY TABLE tt (v INT NOT NULL) ENGINE=Aria"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO tt (v) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	testserver.StartMariaDB(t)
	var v int
	if err := conn.QueryRowContext(ctx, "SELECT v FROM tt").Scan(&v); err != nil || v != 1 {
		t.Fatalf("the first server's temporary table after a second server started: %d, %v", v, err)
	}
	// The server reads its open files still; dropping the table removes
	// them, and fails when they are gone.
	if _, err := conn.ExecContext(ctx, "DROP TEMPORARY TABLE tt"); err != nil {
		t.Fatalf("dropping the first server's temporary table after a second server started: %v", err)
	}
}

// TestSQLTemplateCopies: every server starts on a copy of its kind's
// template, made once: what one server writes, another started later does
// not see, and the template is not remade.
func TestSQLTemplateCopies(t *testing.T) {
	for _, kind := range []string{"mariadb", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			start := func() *sql.DB {
				if kind == "mariadb" {
					return openDB(t, "mysql", testserver.StartMariaDB(t).DSN())
				}
				return openDB(t, "pgx", testserver.StartPostgres(t).DSN())
			}
			db := start()
			if _, err := db.ExecContext(ctx, "CREATE TABLE written_here (v INT)"); err != nil {
				t.Fatal(err)
			}
			tmpls, err := filepath.Glob(filepath.Join(os.TempDir(), "coordkit-templates", kind+"-*", "data"))
			if err != nil || len(tmpls) == 0 {
				t.Fatalf("no %s template in %s: %v", kind, os.TempDir(), err)
			}
			before := map[string]time.Time{}
			for _, p := range tmpls {
				st, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				before[p] = st.ModTime()
			}
			other := start()
			if _, err := other.ExecContext(ctx, "SELECT * FROM written_here"); err == nil {
				t.Fatal("a second server sees a table the first one created: not a copy")
			}
			for p, m := range before {
				if st, err := os.Stat(p); err != nil || !st.ModTime().Equal(m) {
					t.Errorf("template %s changed by a server's start: %v", p, err)
				}
			}
		})
	}
}
