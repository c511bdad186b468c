package sqllock_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/sqllock"
)

// lockFenceRow opens a transaction on a pool of its own that locks key's
// fencing row (as a previous holder's slow COMMIT, or an operator's DELETE
// of expired rows, would) and keeps it until the returned function or the
// test's end rolls it back.
func lockFenceRow(t *testing.T, b backend, key string, how string) (unlock func()) {
	t.Helper()
	ctx := ctxTimeout(t, 60*time.Second)
	tx, err := b.openDB(t).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := "SELECT name FROM " + sqllock.DefaultFenceTable + " WHERE name = ? FOR UPDATE"
	if how == "delete" {
		q = "DELETE FROM " + sqllock.DefaultFenceTable + " WHERE name = ?"
	}
	if _, err := tx.ExecContext(ctx, ph(b, q), sqllock.DefaultPrefix+key); err != nil {
		t.Fatal(err)
	}
	done := false
	unlock = func() {
		if !done {
			done = true
			tx.Rollback()
		}
	}
	t.Cleanup(unlock)
	return unlock
}

// rowWaits counts the waits for row locks that begin after it is made, by
// statements whose text contains like (on PostgreSQL; MariaDB counts every
// wait): acquiring statements behind another transaction.
type rowWaits struct {
	t    *testing.T
	b    backend
	db   *sql.DB
	like string
	base int64              // MySQL: Innodb_row_lock_waits when made
	seen map[[2]string]bool // PostgreSQL: waiting statements seen (pid, start)
}

func newRowWaits(t *testing.T, b backend, like string) *rowWaits {
	t.Helper()
	w := &rowWaits{t: t, b: b, db: b.openDB(t), like: like}
	if b.dialect == sqllock.MySQL {
		w.base = w.innodbWaits()
	}
	return w
}

// count returns the number of waits seen so far; on PostgreSQL, distinct
// waiting statements seen by this and earlier calls. It is safe to call
// from any goroutine, but not concurrently.
func (w *rowWaits) count() (int64, error) {
	if w.b.dialect == sqllock.MySQL {
		var name string
		var n int64
		err := w.db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'").Scan(&name, &n)
		return n - w.base, err
	}
	if w.seen == nil {
		w.seen = map[[2]string]bool{}
	}
	rows, err := w.db.Query(`SELECT CAST(pid AS text), CAST(query_start AS text) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND strpos(query, $1) > 0`, w.like)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var k [2]string
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			return 0, err
		}
		w.seen[k] = true
	}
	return int64(len(w.seen)), rows.Err()
}

// innodbWaits is MariaDB's count of row lock waits since it started (the
// package's tests run one at a time: nobody else waits meanwhile).
func (w *rowWaits) innodbWaits() int64 {
	w.t.Helper()
	var name string
	var n int64
	if err := w.db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'").Scan(&name, &n); err != nil {
		w.t.Fatal(err)
	}
	return n
}

// wait waits until n waits have begun (on PostgreSQL: n distinct waiting
// statements seen), and fails the test if that does not happen within
// 20 s.
func (w *rowWaits) wait(n int) {
	w.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := w.count()
		if err != nil {
			w.t.Fatal(err)
		}
		if got >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("saw %d row-lock waits of acquiring statements, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond) // the poll's period, not a wait for an event
	}
}

// shortKey returns a key no other test uses whose MySQL lock name is the
// name itself (at most 64 bytes of a-z, 0-9 and _.:/-), for IS_USED_LOCK.
func shortKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	rand.Read(b)
	return "errpath:" + hex.EncodeToString(b)
}

// lockersOf returns how many sessions hold key's session lock in the
// database (pg_locks, IS_USED_LOCK), from a connection of its own.
func lockersOf(t *testing.T, b backend, key string) int {
	t.Helper()
	db := b.openDB(t)
	var n int
	var err error
	if b.dialect == sqllock.MySQL {
		err = db.QueryRow("SELECT COUNT(IS_USED_LOCK(?))", sqllock.DefaultPrefix+key).Scan(&n)
	} else {
		// The fencing row names the last session that took the lock; any
		// advisory lock of that backend is one left behind.
		err = db.QueryRow(`SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory'
AND pid = (SELECT session FROM `+sqllock.DefaultFenceTable+` WHERE name = $1)`, sqllock.DefaultPrefix+key).Scan(&n)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReleaseAfterRowLockTimeout: the acquiring statement gets the session
// lock, then waits for the fencing row behind another transaction longer
// than the wait slice (lock_timeout; innodb_lock_wait_timeout), and the
// acquisition is tried again on the same connection. Once the row is free
// and the lock obtained, Release must leave the pooled connection holding
// nothing, and another client obtains at once.
func TestReleaseAfterRowLockTimeout(t *testing.T) {
	for _, b := range dialects {
		for _, how := range []string{"select for update", "delete"} {
			t.Run(b.name+"/"+how, func(t *testing.T) {
				ctx := ctxTimeout(t, 60*time.Second)
				var db *sql.DB
				if b.dialect == sqllock.MySQL {
					db = b.openDB(t, "innodb_lock_wait_timeout=1")
				} else {
					db = b.openDB(t) // the wait slice is the lock_timeout
				}
				db.SetMaxOpenConns(1)
				c := b.client(t, db, sqllock.WithWaitSlice(200*time.Millisecond))
				key := shortKey(t)
				l := mustObtain(t, ctx, c, key)
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				unlock := lockFenceRow(t, b, key, how)
				waits := newRowWaits(t, b, sqllock.DefaultFenceTable)
				got := obtainAsync(ctx, c, key)
				waits.wait(2) // a timeout, and a second try
				unlock()
				r := <-got
				if r.err != nil {
					t.Fatalf("Obtain: %v", r.err)
				}
				if n := lockersOf(t, b, key); n != 1 {
					t.Fatalf("while held, %d sessions hold the lock", n)
				}
				if err := r.l.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
				if n := lockersOf(t, b, key); n != 0 {
					t.Errorf("after Release, %d sessions hold the lock", n)
				}
				assertHoldsNothing(t, db, b)
				if l, err := b.client(t, nil).TryObtain(ctx, key); err != nil {
					t.Fatalf("another client's TryObtain after Release: %v", err)
				} else {
					l.Release(ctx)
				}
			})
		}
	}
}

// TestSessionErrorPathsHoldNothing: after every acquisition or release
// whose statement failed or was cancelled after the lock may have been
// granted, the session holds nothing: no connection goes back to the pool
// holding the lock, and another client obtains it once the row is free.
func TestSessionErrorPathsHoldNothing(t *testing.T) {
	type tcase struct {
		name string
		// params of the pool's DSN, by dialect
		mysql, pg []string
		run       func(t *testing.T, ctx context.Context, b backend, c *sqllock.Client, key string, unlock func()) error
	}
	cases := []tcase{{
		name: "ctx cancelled waiting for the row",
		run: func(t *testing.T, ctx context.Context, b backend, c *sqllock.Client, key string, unlock func()) error {
			wctx, cancel := context.WithCancel(ctx)
			waits := newRowWaits(t, b, sqllock.DefaultFenceTable)
			got := obtainAsync(wctx, c, key)
			waits.wait(1)
			cancel()
			r := <-got
			unlock()
			if r.err == nil {
				r.l.Release(ctx)
			}
			return r.err
		},
	}, {
		name:  "TryObtain, row lock timeout",
		mysql: []string{"innodb_lock_wait_timeout=1"}, pg: []string{"lock_timeout=200"},
		run: func(t *testing.T, ctx context.Context, b backend, c *sqllock.Client, key string, unlock func()) error {
			_, err := c.TryObtain(ctx, key)
			unlock()
			return err
		},
	}, {
		name:  "Obtain, statement timeout",
		mysql: []string{"max_statement_time=0.3"}, pg: []string{"statement_timeout=300"},
		run: func(t *testing.T, ctx context.Context, b backend, c *sqllock.Client, key string, unlock func()) error {
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := c.Obtain(wctx, key)
			unlock()
			return err
		},
	}, {
		name:  "TryObtain, statement timeout",
		mysql: []string{"max_statement_time=0.3"}, pg: []string{"statement_timeout=300"},
		run: func(t *testing.T, ctx context.Context, b backend, c *sqllock.Client, key string, unlock func()) error {
			_, err := c.TryObtain(ctx, key)
			unlock()
			return err
		},
	}, {
		name:  "Release, statement timeout",
		mysql: []string{"max_statement_time=0.3"}, pg: []string{"statement_timeout=300"},
		run: func(t *testing.T, ctx context.Context, b backend, c *sqllock.Client, key string, unlock func()) error {
			unlock() // lock the row only once the lock is held
			l := mustObtain(t, ctx, c, key, lock.WithTTL(2*time.Second))
			unlock = lockFenceRow(t, b, key, "select for update")
			err := l.Release(ctx)
			unlock()
			return err
		},
	}}
	for _, b := range dialects {
		for _, tc := range cases {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				ctx := ctxTimeout(t, 60*time.Second)
				params := tc.pg
				if b.dialect == sqllock.MySQL {
					params = tc.mysql
				}
				db := b.openDB(t, params...)
				db.SetMaxOpenConns(1)
				c := b.client(t, db, sqllock.WithWaitSlice(time.Second))
				key := shortKey(t)
				// The row exists, free. The client's first statements (its
				// check of the fence table's columns, pgx's prepare) run
				// under the pool's 300 ms statement timeout too, and a
				// starved host ran past it (make test-stress, two CPU
				// burners): those, and only those, are tried again.
				l, err := c.Obtain(ctx, key)
				for i := 0; err != nil && statementTimedOut(err) && i < 5; i++ {
					l, err = c.Obtain(ctx, key)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				unlock := lockFenceRow(t, b, key, "select for update")
				err = tc.run(t, ctx, b, c, key, unlock)
				t.Logf("the call returned %v", err)
				assertHoldsNothing(t, db, b) // the pool's one connection, once given back
				if n := lockersOf(t, b, key); n != 0 {
					t.Errorf("%d sessions hold the lock after the call", n)
				}
				// Another client obtains it: at once, or after the row's
				// expiry if the release could not be confirmed.
				other := b.client(t, nil)
				if l, err := other.Obtain(ctx, key, lock.WithTTL(time.Second)); err != nil {
					t.Fatalf("another client's Obtain: %v", err)
				} else {
					l.Release(ctx)
				}
			})
		}
	}
}

// obtainAsync runs one Obtain of key in a goroutine and sends its result.
func obtainAsync(ctx context.Context, c *sqllock.Client, key string, opts ...lock.Option) <-chan obtained {
	ch := make(chan obtained, 1)
	go func() {
		l, err := c.Obtain(ctx, key, opts...)
		ch <- obtained{l: l, at: time.Now(), err: err}
	}()
	return ch
}

// statementTimedOut reports whether err is a statement cut by the
// session's statement timeout (PostgreSQL's statement_timeout, SQLSTATE
// 57014; MariaDB's max_statement_time).
func statementTimedOut(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "57014") || strings.Contains(msg, "max_statement_time")
}
