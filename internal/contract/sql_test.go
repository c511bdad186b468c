package contract_test

import (
	"context"
	"database/sql"
	"io"
	"log"
	"log/slog"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/sqllock"
)

// The SQL servers of the sqllock backends, started by serverRun.
var (
	mariaSrv *testserver.MariaDB
	pgSrv    *testserver.Postgres
)

// startSQL starts MariaDB and PostgreSQL and creates sqllock's tables; the
// returned function stops them.
func startSQL() (stop func(), err error) {
	// go-sql-driver logs the connections it finds broken: "loss reason"
	// breaks one.
	mysql.SetLogger(log.New(io.Discard, "", 0))
	if mariaSrv, err = testserver.NewMariaDB(); err != nil {
		return func() {}, err
	}
	if pgSrv, err = testserver.NewPostgres(); err != nil {
		mariaSrv.Close()
		return func() {}, err
	}
	stop = func() { mariaSrv.Close(); pgSrv.Close() }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range sqlServers() {
		db, err := sql.Open(s.driver, s.dsn)
		if err != nil {
			return stop, err
		}
		for _, lease := range []bool{false, true} {
			c, err := s.newClient(db, lease)
			if err == nil {
				err = c.CreateTable(ctx)
			}
			if err != nil {
				db.Close()
				return stop, err
			}
		}
		db.Close()
	}
	return stop, nil
}

type sqlServer struct {
	name, driver, dsn string
	d                 sqllock.Dialect
}

func sqlServers() []sqlServer {
	return []sqlServer{
		{"MySQL", "mysql", mariaSrv.DSN(), sqllock.MySQL},
		{"Postgres", "pgx", pgSrv.DSN(), sqllock.Postgres},
	}
}

func (s sqlServer) newClient(db *sql.DB, lease bool, opts ...sqllock.Option) (*sqllock.Client, error) {
	switch {
	case lease:
		return sqllock.NewLeaseTable(db, s.d, opts...)
	case s.d == sqllock.MySQL:
		return sqllock.NewMySQL(db, opts...)
	}
	return sqllock.NewPostgres(db, opts...)
}

func (s sqlServer) db(t *testing.T) *sql.DB {
	db, err := sql.Open(s.driver, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// sqlBackends are sqllock's four lockers: the session locks of both
// databases, lost by killing the holder's session, and the lease table on
// both, lost by deleting its row.
func sqlBackends() []backend {
	const ttl = 3 * time.Second // as backends(): no expiry on a starved host between the checks' steps
	var bs []backend
	for _, s := range sqlServers() {
		for _, lease := range []bool{false, true} {
			name := "sqllock." + s.name
			table := sqllock.DefaultFenceTable
			reason := sqllock.ErrSessionLost
			if lease {
				name = "sqllock.LeaseTable(" + s.name + ")"
				table = sqllock.DefaultLeaseTable
				reason = lock.ErrNotHeld
			}
			bs = append(bs, backend{
				Name: name,
				Open: func(t *testing.T) closer {
					c, err := s.newClient(s.db(t), lease, sqllock.WithDefaultTTL(ttl),
						sqllock.WithLogger(slog.New(slog.DiscardHandler)))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { c.Close() })
					return c
				},
				Reentrant: true, TTL: true, Reason: reason,
				Lose: func(t *testing.T, _ closer, key string) {
					db := s.db(t)
					ctx := context.Background()
					name := sqllock.DefaultPrefix + key
					var q string
					switch {
					case lease && s.d == sqllock.MySQL:
						q = "DELETE FROM " + table + " WHERE name = ?"
					case lease:
						q = "DELETE FROM " + table + " WHERE name = $1"
					case s.d == sqllock.MySQL:
						var id int64
						if err := db.QueryRowContext(ctx, "SELECT session FROM "+table+" WHERE name = ?", name).Scan(&id); err != nil {
							t.Fatal(err)
						}
						q, name = "KILL ?", ""
						if _, err := db.ExecContext(ctx, q, id); err != nil {
							t.Fatal(err)
						}
						return
					default:
						q = "SELECT pg_terminate_backend(session::int) FROM " + table + " WHERE name = $1"
					}
					if _, err := db.ExecContext(ctx, q, name); err != nil {
						t.Fatal(err)
					}
				},
			})
		}
	}
	return bs
}
