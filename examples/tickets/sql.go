package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/sqllock"
)

// The SQL strategies keep the stock in a row of the database they lock on
// (MariaDB/MySQL or PostgreSQL), as the database recipes do:
//
//	CREATE TABLE tickets (id INT PRIMARY KEY, stock INT NOT NULL, version BIGINT NOT NULL)
//
//	<db>:session   the read-check-write under a session lock (GET_LOCK, advisory lock)
//	<db>:lease     the same under the lease-table lock
//	<db>:update    UPDATE ... SET stock = stock - 1 WHERE id = 1 AND stock >= 1 (sqllock.Stock.Take)
//	<db>:forupdate the read-check-write in a transaction after SELECT ... FOR UPDATE (sqllock.ForUpdate)
//	<db>:version   read stock and version, write WHERE version = read (sqllock.Versioned)
//
// <db> is mysql or pg.

const ticketsDDL = "CREATE TABLE IF NOT EXISTS tickets (id INT PRIMARY KEY, stock INT NOT NULL, version BIGINT NOT NULL)"

// sqlDB is one of the two databases.
type sqlDB struct {
	name    string // "mysql" or "pg"
	driver  string
	dialect sqllock.Dialect
}

var sqlDBs = []sqlDB{{"mysql", "mysql", sqllock.MySQL}, {"pg", "pgx", sqllock.Postgres}}

// ph rewrites a query's '?' placeholders for d.
func (d sqlDB) ph(q string) string {
	if d.dialect == sqllock.MySQL {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// dsn returns the database's DSN, starting a server on first use.
func (s *servers) dsn(d sqlDB) (string, error) {
	if d.dialect == sqllock.MySQL {
		if s.cfg.mysql != "" {
			return s.cfg.mysql, nil
		}
		if s.mysqlAt == "" {
			m, err := testserver.NewMariaDB()
			if err != nil {
				return "", err
			}
			s.closers = append(s.closers, m.Close)
			// interpolateParams: go-sql-driver/mysql otherwise prepares
			// each statement with arguments first, a round trip more.
			s.mysqlAt = m.DSN("interpolateParams=true")
		}
		return s.mysqlAt, nil
	}
	if s.cfg.postgres != "" {
		return s.cfg.postgres, nil
	}
	if s.pgAt == "" {
		p, err := testserver.NewPostgres()
		if err != nil {
			return "", err
		}
		s.closers = append(s.closers, p.Close)
		s.pgAt = p.DSN()
	}
	return s.pgAt, nil
}

// newDB returns a new pool on the database (one per simulated process).
func (s *servers) newDB(d sqlDB) (*sql.DB, error) {
	dsn, err := s.dsn(d)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(d.driver, dsn)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { db.Close() })
	return db, nil
}

// sqlStore keeps the stock in the tickets row (id 1).
type sqlStore struct {
	e  *servers
	d  sqlDB
	db *sql.DB
}

func newSQLStore(ctx context.Context, e *servers, d sqlDB) (stockStore, error) {
	db, err := e.newDB(d)
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, ticketsDDL); err != nil {
		return nil, err
	}
	return sqlStore{e, d, db}, nil
}

func (s sqlStore) set(ctx context.Context, n int) error {
	return sqllock.Tx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "DELETE FROM tickets WHERE id = 1"); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.d.ph("INSERT INTO tickets (id, stock, version) VALUES (1, ?, 0)"), n)
		return err
	})
}

func (s sqlStore) left(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT stock FROM tickets WHERE id = 1").Scan(&n)
	return n, err
}

func (s sqlStore) sections(n int, work time.Duration, sold func()) ([]func(ctx context.Context) error, error) {
	secs := make([]func(ctx context.Context) error, n)
	for i := range secs {
		db, err := s.e.newDB(s.d)
		if err != nil {
			return nil, err
		}
		write := s.d.ph("UPDATE tickets SET stock = ? WHERE id = 1")
		secs[i] = func(ctx context.Context) error {
			var v int
			if err := db.QueryRowContext(ctx, "SELECT stock FROM tickets WHERE id = 1").Scan(&v); err != nil {
				return err
			}
			if v <= 0 {
				return errSoldOut
			}
			if work > 0 {
				time.Sleep(work)
			}
			if _, err := db.ExecContext(ctx, write, v-1); err != nil {
				return err
			}
			sold()
			return nil
		}
	}
	return secs, nil
}

func init() {
	for _, d := range sqlDBs {
		store := func(ctx context.Context, e *servers) (stockStore, error) { return newSQLStore(ctx, e, d) }

		// The read-check-write under one of sqllock's Lockers, one Client
		// (and pool) per simulated process.
		locked := func(lease bool) func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
			return func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
				buys := make([]buyFunc, n)
				var lockers []*sqllock.Client
				cleanup := func() {
					for _, l := range lockers {
						l.Close()
					}
				}
				for i := range buys {
					db, err := e.newDB(d)
					if err != nil {
						cleanup()
						return nil, nil, err
					}
					var l *sqllock.Client
					switch {
					case lease:
						l, err = sqllock.NewLeaseTable(db, d.dialect)
					case d.dialect == sqllock.MySQL:
						l, err = sqllock.NewMySQL(db)
					default:
						l, err = sqllock.NewPostgres(db)
					}
					if err == nil && i == 0 {
						err = l.CreateTable(ctx)
					}
					if err != nil {
						cleanup()
						return nil, nil, err
					}
					lockers = append(lockers, l)
					buys[i] = lockerBuy(l)
				}
				return buys, cleanup, nil
			}
		}
		addStrategy(strategy{name: d.name + ":session", store: store, setup: locked(false)})
		addStrategy(strategy{name: d.name + ":lease", store: store, setup: locked(true)})

		// One conditional UPDATE: the whole section is the row's arithmetic.
		addStrategy(strategy{name: d.name + ":update", store: store, setup: func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
			stock := sqllock.Stock{Dialect: d.dialect, Table: "tickets", Key: "id", Column: "stock"}
			buys := make([]buyFunc, n)
			for i := range buys {
				db, err := e.newDB(d)
				if err != nil {
					return nil, nil, err
				}
				buys[i] = func(ctx context.Context, p purchase) error {
					err := stock.Take(ctx, db, 1, 1)
					if errors.Is(err, sqllock.ErrInsufficient) {
						return errSoldOut
					}
					if err == nil {
						p.sold()
					}
					return err
				}
			}
			return buys, func() {}, nil
		}})

		// The read-check-write in a transaction that locks the row first.
		addStrategy(strategy{name: d.name + ":forupdate", store: store, setup: func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
			buys := make([]buyFunc, n)
			for i := range buys {
				db, err := e.newDB(d)
				if err != nil {
					return nil, nil, err
				}
				write := d.ph("UPDATE tickets SET stock = ? WHERE id = 1")
				buys[i] = func(ctx context.Context, p purchase) error {
					var v int
					err := sqllock.ForUpdate(ctx, db, "SELECT stock FROM tickets WHERE id = 1", nil,
						func(rows *sql.Rows) error { return rows.Scan(&v) },
						func(ctx context.Context, tx *sql.Tx) error {
							if v <= 0 {
								return errSoldOut
							}
							if e.cfg.work > 0 {
								time.Sleep(e.cfg.work)
							}
							_, err := tx.ExecContext(ctx, write, v-1)
							return err
						}, sqllock.WithLocking(sqllock.LockForUpdate)) // appended to the query: it must have none
					if err == nil {
						p.sold()
					}
					return err
				}
			}
			return buys, func() {}, nil
		}})

		// Optimistic: read stock and version, write if the version held.
		addStrategy(strategy{name: d.name + ":version", store: store, setup: func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
			v := sqllock.Versioned{Dialect: d.dialect, Table: "tickets", Key: "id", Version: "version", Columns: []string{"stock"}}
			buys := make([]buyFunc, n)
			for i := range buys {
				db, err := e.newDB(d)
				if err != nil {
					return nil, nil, err
				}
				buys[i] = func(ctx context.Context, p purchase) error {
					_, err := v.Update(ctx, db, 1, func(ctx context.Context, scan func(...any) error) ([]any, error) {
						var left int
						if err := scan(&left); err != nil {
							return nil, err
						}
						if left <= 0 {
							return nil, errSoldOut
						}
						if e.cfg.work > 0 {
							time.Sleep(e.cfg.work)
						}
						return []any{left - 1}, nil
					}, sqllock.WithAttempts(1000))
					if err == nil {
						p.sold()
					}
					return err
				}
			}
			return buys, func() {}, nil
		}})
	}
}

var _ lock.Locker = (*sqllock.Client)(nil)
