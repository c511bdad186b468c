package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/sqllock"
)

// dialects are the two databases, by the session-lock backends.
var dialects = backends[:2]

// ph returns the dialect's placeholders for a query written with '?'.
func ph(b backend, q string) string {
	if b.dialect == sqllock.MySQL {
		return q
	}
	out, n := []byte{}, 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			out = append(out, '$')
			out = append(out, []byte(itoa(n))...)
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}

func itoa(n int) string { return sprintf("%d", n) }

// ticketTable makes a table of one row (id 1) with stock and version.
func ticketTable(t *testing.T, b backend, db *sql.DB, name string, stock int) {
	t.Helper()
	exec(t, db, "DROP TABLE IF EXISTS "+name)
	exec(t, db, "CREATE TABLE "+name+" (id INT PRIMARY KEY, stock INT NOT NULL, version BIGINT NOT NULL)")
	exec(t, db, ph(b, "INSERT INTO "+name+" (id, stock, version) VALUES (1, ?, 0)"), stock)
}

func stockOf(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT stock FROM " + table + " WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// race runs buyers goroutines, each calling buy until it returns done (or
// an error, which fails the test), and returns the number of purchases.
func race(t *testing.T, buyers int, buy func() (bool, error)) int64 {
	t.Helper()
	var sold atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, buyers)
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ok, err := buy()
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					return
				}
				sold.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return sold.Load()
}

func TestStockTake(t *testing.T) {
	for _, b := range dialects {
		t.Run(b.name, func(t *testing.T) {
			const stock = 100
			ctx := ctxTimeout(t, 30*time.Second)
			db := b.openDB(t)
			ticketTable(t, b, db, "take_"+strings.ToLower(b.name), stock)
			s := sqllock.Stock{Dialect: b.dialect, Table: "take_" + strings.ToLower(b.name), Key: "id", Column: "stock"}
			sold := race(t, 16, func() (bool, error) {
				err := s.Take(ctx, db, 1, 1)
				if errors.Is(err, sqllock.ErrInsufficient) {
					return false, nil
				}
				return err == nil, err
			})
			if left := stockOf(t, db, s.Table); sold != stock || left != 0 {
				t.Fatalf("sold %d, left %d; want %d, 0", sold, left, stock)
			}
			exec(t, db, "UPDATE "+s.Table+" SET stock = 3")
			if err := s.Take(ctx, db, 1, 4); !errors.Is(err, sqllock.ErrInsufficient) || errors.Is(err, sqllock.ErrNoRow) {
				t.Errorf("Take of 4 out of 3: %v", err)
			}
			if err := s.Take(ctx, db, 2, 1); !errors.Is(err, sqllock.ErrNoRow) || errors.Is(err, sqllock.ErrInsufficient) {
				t.Errorf("Take from a missing row: %v, want ErrNoRow", err)
			}
			if err := sqllock.Tx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
				return s.Take(ctx, tx, 2, 1)
			}); !errors.Is(err, sqllock.ErrNoRow) {
				t.Errorf("Take from a missing row in a transaction: %v, want ErrNoRow", err)
			}
			if err := s.Take(ctx, db, 1, 3); err != nil || stockOf(t, db, s.Table) != 0 {
				t.Errorf("Take of all 3: %v", err)
			}
			for _, bad := range []struct {
				s sqllock.Stock
				n int64
			}{
				{s, 0}, {s, -1},
				{sqllock.Stock{Table: s.Table, Key: "id", Column: "stock"}, 1},
				{sqllock.Stock{Dialect: b.dialect, Table: "t; DROP TABLE t", Key: "id", Column: "stock"}, 1},
				{sqllock.Stock{Dialect: b.dialect, Table: s.Table, Key: "id = id OR 1", Column: "stock"}, 1},
			} {
				if err := bad.s.Take(ctx, db, 1, bad.n); !errors.Is(err, sqllock.ErrInvalid) {
					t.Errorf("Take(%+v, %d): %v, want ErrInvalid", bad.s, bad.n, err)
				}
			}
		})
	}
}

// TestForUpdate: buyers read, check and write the stock in a transaction
// that locks the row first: exactly the stock is sold.
func TestForUpdate(t *testing.T) {
	for _, b := range dialects {
		t.Run(b.name, func(t *testing.T) {
			const stock = 60
			ctx := ctxTimeout(t, 60*time.Second)
			db := b.openDB(t)
			table := "fu_" + strings.ToLower(b.name)
			ticketTable(t, b, db, table, stock)
			sold := race(t, 8, func() (bool, error) {
				var left int
				var ok bool
				err := sqllock.ForUpdate(ctx, db, "SELECT stock FROM "+table+" WHERE id = 1", nil,
					func(rows *sql.Rows) error { return rows.Scan(&left) },
					func(ctx context.Context, tx *sql.Tx) error {
						if ok = left > 0; !ok {
							return nil
						}
						time.Sleep(200 * time.Microsecond) // the work between read and write
						_, err := tx.ExecContext(ctx, ph(b, "UPDATE "+table+" SET stock = ? WHERE id = 1"), left-1)
						return err
					})
				return ok, err
			})
			if left := stockOf(t, db, table); sold != stock || left != 0 {
				t.Fatalf("sold %d, left %d; want %d, 0", sold, left, stock)
			}
		})
	}
}

// TestForUpdateDeadlock: two transactions lock two rows in opposite orders;
// the database kills one (a deadlock) and ForUpdate runs it again: both
// succeed.
func TestForUpdateDeadlock(t *testing.T) {
	for _, b := range dialects {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			db := b.openDB(t)
			table := "dl_" + strings.ToLower(b.name)
			exec(t, db, "DROP TABLE IF EXISTS "+table)
			exec(t, db, "CREATE TABLE "+table+" (id INT PRIMARY KEY, v INT NOT NULL)")
			exec(t, db, "INSERT INTO "+table+" (id, v) VALUES (1, 0), (2, 0)")
			var both sync.WaitGroup
			both.Add(2)
			var tries atomic.Int32
			run := func(first, second int) error {
				var once sync.Once
				return sqllock.ForUpdate(ctx, db, ph(b, "SELECT v FROM "+table+" WHERE id = ?"), []any{first}, nil,
					func(ctx context.Context, tx *sql.Tx) error {
						tries.Add(1)
						once.Do(func() { both.Done(); both.Wait() }) // both hold their first row
						if b.dialect == sqllock.Postgres {
							if _, err := tx.ExecContext(ctx, "SET LOCAL deadlock_timeout = '100ms'"); err != nil {
								return err
							}
						}
						_, err := tx.ExecContext(ctx, ph(b, "UPDATE "+table+" SET v = v + 1 WHERE id = ?"), second)
						return err
					})
			}
			errs := make(chan error, 2)
			go func() { errs <- run(1, 2) }()
			go func() { errs <- run(2, 1) }()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			var sum int
			db.QueryRow("SELECT SUM(v) FROM " + table).Scan(&sum)
			if sum != 2 || tries.Load() < 3 {
				t.Fatalf("sum %d (want 2), %d tries (want a retry after the deadlock)", sum, tries.Load())
			}
		})
	}
}

// TestForUpdateLockWaitTimeout: a transaction holds the row longer than
// the database's lock wait timeout; ForUpdate's first try times out and a
// later one gets the row.
func TestForUpdateLockWaitTimeout(t *testing.T) {
	for _, b := range dialects {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			var db *sql.DB
			if b.dialect == sqllock.MySQL {
				db = b.openDB(t, "innodb_lock_wait_timeout=1")
			} else {
				db = b.openDB(t, "lock_timeout=300")
			}
			table := "lw_" + strings.ToLower(b.name)
			ticketTable(t, b, db, table, 1)
			holder, err := b.openDB(t).BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := holder.ExecContext(ctx, "UPDATE "+table+" SET stock = 5 WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			time.AfterFunc(1500*time.Millisecond, func() { holder.Commit() })
			var retries, seen int
			err = sqllock.ForUpdate(ctx, db, "SELECT stock FROM "+table+" WHERE id = 1", nil,
				func(rows *sql.Rows) error { return rows.Scan(&seen) },
				func(context.Context, *sql.Tx) error { return nil },
				sqllock.WithBackoff(func(int) time.Duration { retries++; return 100 * time.Millisecond }))
			if err != nil || seen != 5 || retries < 1 {
				t.Fatalf("ForUpdate behind a long transaction: %v, stock %d, %d retries (want a lock wait timeout and a retry)", err, seen, retries)
			}
		})
	}
}

// TestVersioned: buyers update the stock optimistically; every sale is
// counted once, conflicts are retried, and the version counts the writes.
func TestVersioned(t *testing.T) {
	for _, b := range dialects {
		t.Run(b.name, func(t *testing.T) {
			const stock = 40
			ctx := ctxTimeout(t, 60*time.Second)
			db := b.openDB(t)
			table := "ver_" + strings.ToLower(b.name)
			ticketTable(t, b, db, table, stock)
			v := sqllock.Versioned{Dialect: b.dialect, Table: table, Key: "id", Version: "version", Columns: []string{"stock"}}
			errSoldOut := errors.New("sold out")
			var calls atomic.Int32
			sold := race(t, 6, func() (bool, error) {
				_, err := v.Update(ctx, db, 1, func(ctx context.Context, scan func(...any) error) ([]any, error) {
					calls.Add(1)
					var left int
					if err := scan(&left); err != nil {
						return nil, err
					}
					if left <= 0 {
						return nil, errSoldOut
					}
					time.Sleep(200 * time.Microsecond)
					return []any{left - 1}, nil
				}, sqllock.WithAttempts(1000))
				if errors.Is(err, errSoldOut) {
					return false, nil
				}
				return err == nil, err
			})
			var version int64
			db.QueryRow("SELECT version FROM " + table + " WHERE id = 1").Scan(&version)
			if left := stockOf(t, db, table); sold != stock || left != 0 || version != stock {
				t.Fatalf("sold %d, left %d, version %d; want %d, 0, %d", sold, left, version, stock, stock)
			}
			t.Logf("%d sales took %d tries", sold, calls.Load())

			// A writer that always gets in between: ErrConflict after the attempts.
			_, err := v.Update(ctx, db, 1, func(ctx context.Context, scan func(...any) error) ([]any, error) {
				var left int
				scan(&left)
				exec(t, db, "UPDATE "+table+" SET version = version + 1 WHERE id = 1")
				return []any{left}, nil
			}, sqllock.WithAttempts(3), sqllock.WithBackoff(func(int) time.Duration { return time.Millisecond }))
			if !errors.Is(err, sqllock.ErrConflict) {
				t.Errorf("Update against a writer in between: %v, want ErrConflict", err)
			}
			if _, err := v.Update(ctx, db, 99, func(context.Context, func(...any) error) ([]any, error) {
				return []any{1}, nil
			}); !errors.Is(err, sql.ErrNoRows) {
				t.Errorf("Update of a missing row: %v, want sql.ErrNoRows", err)
			}
			bad := v
			bad.Columns = []string{"stock; --"}
			if _, err := bad.Update(ctx, db, 1, nil); !errors.Is(err, sqllock.ErrInvalid) {
				t.Errorf("Update with a bad column: %v, want ErrInvalid", err)
			}
		})
	}
}

// TestForUpdateLiteralFor: two read-modify-writes through ForUpdate of a
// query whose string literal contains " for ". The second must wait for
// the first's row lock and read its write: no update is lost.
func TestForUpdateLiteralFor(t *testing.T) {
	for _, b := range dialects {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			db := b.openDB(t)
			table := "lf_" + strings.ToLower(b.name)
			exec(t, db, "DROP TABLE IF EXISTS "+table)
			exec(t, db, "CREATE TABLE "+table+" (id INT PRIMARY KEY, status VARCHAR(40) NOT NULL, n INT NOT NULL)")
			exec(t, db, "INSERT INTO "+table+" (id, status, n) VALUES (1, 'paid', 0)")
			query := "SELECT n FROM " + table + " WHERE id = 1 AND status <> 'waiting for payment'"
			write := ph(b, "UPDATE "+table+" SET n = ? WHERE id = 1")
			aRead, bRead := make(chan struct{}), make(chan struct{})
			var once sync.Once
			waits := newRowWaits(t, b, "waiting for payment")
			increment := func(first bool) error {
				var n int
				return sqllock.ForUpdate(ctx, db, query, nil,
					func(rows *sql.Rows) error {
						if !first {
							once.Do(func() { close(bRead) })
						}
						return rows.Scan(&n)
					},
					func(ctx context.Context, tx *sql.Tx) error {
						if first {
							close(aRead)
							// Hold the row until the other has read it
							// (the lost update) or waits for its lock.
							for {
								select {
								case <-bRead:
								case <-ctx.Done():
									return ctx.Err()
								default:
									if w, err := waits.count(); err != nil || w == 0 {
										if err != nil {
											return err
										}
										time.Sleep(5 * time.Millisecond) // the poll's period
										continue
									}
								}
								break
							}
						}
						_, err := tx.ExecContext(ctx, write, n+1)
						return err
					}, sqllock.WithAttempts(1))
			}
			errs := make(chan error, 2)
			go func() { errs <- increment(true) }()
			<-aRead
			go func() { errs <- increment(false) }()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			var n int
			if err := db.QueryRow("SELECT n FROM " + table + " WHERE id = 1").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 2 {
				t.Fatalf("two increments left n = %d: an update was lost (the query got no FOR UPDATE)", n)
			}
		})
	}
}

// TestForUpdateLocking: each locking clause a database takes runs, and
// does what it says on a row another transaction has locked.
func TestForUpdateLocking(t *testing.T) {
	for _, b := range dialects {
		clauses := []sqllock.Locking{sqllock.LockForUpdate, sqllock.LockForUpdateNoWait,
			sqllock.LockForUpdateSkipLocked, sqllock.LockForShare}
		if b.dialect == sqllock.MySQL { // MariaDB
			clauses[3] = sqllock.LockInShareMode
		}
		for _, l := range clauses {
			t.Run(b.name+"/"+string(l), func(t *testing.T) {
				ctx := ctxTimeout(t, 30*time.Second)
				db := b.openDB(t)
				table := "lk_" + strings.ToLower(b.name)
				ticketTable(t, b, db, table, 3)
				query := "SELECT stock FROM " + table + " WHERE id = 1 -- a comment ends the query"
				rows := 0
				run := func(opts ...sqllock.RetryOption) error {
					rows = 0
					return sqllock.ForUpdate(ctx, db, query, nil,
						func(*sql.Rows) error { rows++; return nil },
						func(context.Context, *sql.Tx) error { return nil },
						append(opts, sqllock.WithLocking(l))...)
				}
				if err := run(); err != nil || rows != 1 {
					t.Fatalf("on a free row: %v, %d rows", err, rows)
				}
				if l != sqllock.LockForUpdateNoWait && l != sqllock.LockForUpdateSkipLocked {
					return
				}
				holder, err := b.openDB(t).BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer holder.Rollback()
				if _, err := holder.ExecContext(ctx, "UPDATE "+table+" SET stock = 2 WHERE id = 1"); err != nil {
					t.Fatal(err)
				}
				err = run(sqllock.WithAttempts(1))
				switch {
				case l == sqllock.LockForUpdateNoWait && !sqllock.Retryable(err):
					t.Fatalf("NOWAIT on a locked row: %v (want a lock wait error)", err)
				case l == sqllock.LockForUpdateSkipLocked && (err != nil || rows != 0):
					t.Fatalf("SKIP LOCKED on a locked row: %v, %d rows (want none)", err, rows)
				}
			})
		}
	}
	if err := sqllock.ForUpdate(context.Background(), nil, "SELECT 1", nil, nil,
		func(context.Context, *sql.Tx) error { return nil }, sqllock.WithLocking("")); !errors.Is(err, sqllock.ErrInvalid) {
		t.Fatalf("an empty locking clause: %v", err)
	}
}
