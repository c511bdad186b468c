package workerid_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/watchdog"
)

// sqlServer is what the tests do to a database server.
type sqlServer interface {
	Kill()
	Pause() error
	Resume() error
	Start() error
	Restart() error
	Addr() string
}

// sqlDB is one of the two databases under test.
type sqlDB struct {
	name    string
	driver  string
	dialect sqllock.Dialect
	srv     func() sqlServer
	dsnAt   func(addr string) string
}

func sqlDBs() []sqlDB {
	return []sqlDB{
		{"mariadb", "mysql", sqllock.MySQL, func() sqlServer { return maria }, func(a string) string { return maria.DSNAt(a) }},
		{"postgres", "pgx", sqllock.Postgres, func() sqlServer { return pg }, func(a string) string { return pg.DSNAt(a) }},
	}
}

// forEachSQL runs f as a subtest for each database.
func forEachSQL(t *testing.T, f func(t *testing.T, s sqlDB)) {
	for _, s := range sqlDBs() {
		t.Run(s.name, func(t *testing.T) { f(t, s) })
	}
}

// open returns a pool of its own on the server (through addr if not ""),
// closed when the test ends: what another process would have.
func (s sqlDB) open(t testing.TB, addr string) *sql.DB {
	t.Helper()
	if addr == "" {
		addr = s.srv().Addr()
	}
	db, err := sql.Open(s.driver, s.dsnAt(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// sqlTables numbers the tables made by this test binary.
var sqlTables atomic.Int64

// newTable makes a worker table no other test uses, and returns its name.
func (s sqlDB) newTable(t testing.TB) string {
	t.Helper()
	table := fmt.Sprintf("wk_%d", sqlTables.Add(1))
	l, err := workerid.NewSQL(s.open(t, ""), workerid.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	return table
}

// leaser returns a leaser on table over a pool of its own, quiet (the
// tests lose leases on purpose).
func (s sqlDB) leaser(t testing.TB, table string, opts ...workerid.Option) *workerid.SQLLeaser {
	t.Helper()
	return s.leaserOn(t, s.open(t, ""), table, opts...)
}

func (s sqlDB) leaserOn(t testing.TB, db *sql.DB, table string, opts ...workerid.Option) *workerid.SQLLeaser {
	t.Helper()
	opts = append([]workerid.Option{workerid.WithTable(table), workerid.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	l, err := workerid.NewSQL(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// exec runs stmt (with ? placeholders, numbered for PostgreSQL) on a pool
// of its own.
func (s sqlDB) exec(t testing.TB, stmt string, args ...any) {
	t.Helper()
	if s.dialect == sqllock.Postgres {
		for i := 1; strings.Contains(stmt, "?"); i++ {
			stmt = strings.Replace(stmt, "?", fmt.Sprintf("$%d", i), 1)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.open(t, "").ExecContext(ctx, stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// expire moves the expiry of a lease's row into the past, as the database
// sees it: the next renewal finds the row expired, and another leaser may
// take the ID.
func (s sqlDB) expire(t testing.TB, table string, l *workerid.Lease) {
	t.Helper()
	past := "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"
	if s.dialect == sqllock.Postgres {
		past = "now() - interval '1 second'"
	}
	s.exec(t, "UPDATE "+table+" SET expires = "+past+" WHERE service = ? AND id = ?", l.Service(), l.ID())
}

// sqlBackend is a backend of backends() (lease_test.go): a table of each
// subtest's own on the package's server, and a proxy per conn.
func sqlBackend(s sqlDB) backend {
	return backend{s.name, func(t *testing.T) func(opts ...workerid.Option) conn {
		table := s.newTable(t)
		return func(opts ...workerid.Option) conn {
			t.Helper()
			p := testserver.StartProxy(t, s.srv().Addr())
			l, err := workerid.NewSQL(s.open(t, p.Addr()), append(opts[:len(opts):len(opts)], workerid.WithTable(table))...)
			if err != nil {
				t.Fatal(err)
			}
			return conn{
				Leaser: l,
				delay:  p.SetLatency,
				lose: func(t *testing.T, l *workerid.Lease) {
					t.Helper()
					s.expire(t, table, l)
				},
			}
		}
	}}
}

func TestSQLLeaseListRelease(t *testing.T) {
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		ctx := ctxT(t, 30*time.Second)
		table := s.newTable(t)
		l := s.leaser(t, table, workerid.WithHost("host-a"))
		if l.Dialect() != s.dialect || l.Table() != table {
			t.Fatalf("dialect %v table %s, want %v %s", l.Dialect(), l.Table(), s.dialect, table)
		}
		var leases []*workerid.Lease
		for want := range int64(3) {
			lease, err := l.Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			release(t, lease)
			if lease.ID() != want || lease.Service() != "svc" {
				t.Fatalf("lease %d: got %s/%d", want, lease.Service(), lease.ID())
			}
			leases = append(leases, lease)
		}
		// Another service has IDs of its own.
		other, err := l.Lease(ctx, "other")
		if err != nil || other.ID() != 0 {
			t.Fatalf("other service: %v, %v", other, err)
		}
		release(t, other)

		holders, err := l.List(ctx, "svc")
		if err != nil || len(holders) != 3 {
			t.Fatalf("List: %+v, %v", holders, err)
		}
		for i, h := range holders {
			if h.ID != int64(i) || h.Owner == "" || h.Host != "host-a" || h.PID == 0 ||
				time.Since(h.Since).Abs() > time.Minute || h.TTL <= 0 || h.TTL > 10*time.Second {
				t.Fatalf("holder %d: %+v", i, h)
			}
		}
		// Freed in the middle: the lowest free ID is taken next.
		if err := leases[1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := leases[1].Release(ctx); !errors.Is(err, workerid.ErrReleased) {
			t.Fatalf("second Release: %v", err)
		}
		if holders, _ := l.List(ctx, "svc"); len(holders) != 2 || holders[1].ID != 2 {
			t.Fatalf("List after a release: %+v", holders)
		}
		again, err := l.Lease(ctx, "svc")
		if err != nil || again.ID() != 1 {
			t.Fatalf("re-lease: %v, %v", again, err)
		}
		release(t, again)
		for _, lease := range []*workerid.Lease{leases[0], leases[2], again} {
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if holders, err := l.List(ctx, "svc"); err != nil || len(holders) != 0 {
			t.Fatalf("List after releasing all: %+v, %v", holders, err)
		}
	})
}

// TestSQLReleaseKeepsMark: Release stops the generator, stores its mark in
// the row and frees the row, which keeps the mark: the ID's next holder
// starts above every ID the first issued, even with a clock behind them.
func TestSQLReleaseKeepsMark(t *testing.T) {
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		ctx := ctxT(t, 30*time.Second)
		table := s.newTable(t)
		a, err := s.leaser(t, table).Lease(ctx, "svc")
		if err != nil {
			t.Fatal(err)
		}
		// A's clock runs ahead: a millisecond per reading.
		t1 := time.Now().Truncate(time.Millisecond)
		sfA, err := a.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock((&stepClock{t: t1, step: time.Millisecond}).Now))
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for range 500 {
			id, err := sfA.Next()
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := sfA.Next(); !errors.Is(err, idgen.ErrLeaseLost) || !errors.Is(err, workerid.ErrReleased) {
			t.Fatalf("Next after Release: %v", err)
		}
		b, err := s.leaser(t, table).Lease(ctx, "svc")
		if err != nil || b.ID() != a.ID() {
			t.Fatalf("re-lease: %v, %v", b, err)
		}
		release(t, b)
		mark, err := b.HighWater().Load(ctx)
		last := idgen.LayoutWorker10.Decompose(ids[len(ids)-1]).Time
		if err != nil || mark.Before(last) {
			t.Fatalf("mark after Release: %v (%v), below the last ID's time %v", mark, err, last)
		}
		// B's clock reads t1, behind A's last ID; it borrows up to a second.
		sfB, err := b.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock((&stepClock{t: t1, step: time.Millisecond}).Now), idgen.WithBorrow(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if n := reissued(t, sfB, ids); n > 0 {
			t.Fatalf("the next holder reissued %d of the %d IDs issued before the release", n, len(ids))
		}
	})
}

func TestSQLExhausted(t *testing.T) {
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		ctx := ctxT(t, 30*time.Second)
		l := s.leaser(t, s.newTable(t), workerid.WithMax(2))
		for range 3 {
			lease, err := l.Lease(ctx, "tiny")
			if err != nil {
				t.Fatal(err)
			}
			release(t, lease)
		}
		_, err := l.Lease(ctx, "tiny")
		var ex *workerid.ExhaustedError
		if !errors.As(err, &ex) || !errors.Is(err, workerid.ErrExhausted) || ex.Max != 2 || !strings.Contains(err.Error(), `"tiny"`) {
			t.Fatalf("want ExhaustedError naming the service, got %v", err)
		}
	})
}

// TestSQLExpiredRowIsTakenOver: a row whose expiry has passed on the
// database's clock is free, although it still names its old owner; the old
// owner's next renewal finds it taken and loses the lease.
func TestSQLExpiredRowIsTakenOver(t *testing.T) {
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		ctx := ctxT(t, 30*time.Second)
		table := s.newTable(t)
		// A TTL of 3 s: a shorter one can expire on the old holder's own
		// watchdog (ErrExpired, not the ErrNotHeld asserted) when a loaded
		// host stalls it; its renewal every TTL/3 finds the row taken.
		a, err := s.leaser(t, table, workerid.WithMax(0), workerid.WithTTL(3*time.Second)).Lease(ctx, "svc")
		if err != nil {
			t.Fatal(err)
		}
		release(t, a)
		s.expire(t, table, a)
		b, err := s.leaser(t, table, workerid.WithMax(0)).Lease(ctx, "svc")
		if err != nil || b.ID() != 0 {
			t.Fatalf("lease of the expired row: %v, %v", b, err)
		}
		release(t, b)
		waitLost(t, a, 6*time.Second)
		if !errors.Is(a.Err(), watchdog.ErrNotHeld) {
			t.Fatalf("the old holder's cause: %v, want ErrNotHeld", a.Err())
		}
		// The old holder's Release does not free the new holder's row.
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		holders, err := s.leaser(t, table).List(ctx, "svc")
		if err != nil || len(holders) != 1 || b.Err() != nil {
			t.Fatalf("after the old holder's Release: %+v, %v, new holder %v", holders, err, b.Err())
		}
	})
}

// fakeDriver is a driver whose dialect NewSQL cannot tell.
type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) { return nil, errors.New("fake driver") }

var registerFake sync.Once

func TestSQLBadInput(t *testing.T) {
	registerFake.Do(func() { sql.Register("workerid-fake", fakeDriver{}) })
	fake, err := sql.Open("workerid-fake", "")
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	if _, err := workerid.NewSQL(nil); !errors.Is(err, workerid.ErrInvalid) {
		t.Errorf("nil db: %v", err)
	}
	if _, err := workerid.NewSQL(fake); !errors.Is(err, workerid.ErrInvalid) || !strings.Contains(err.Error(), "WithDialect") {
		t.Errorf("unknown driver: %v", err)
	}
	if l, err := workerid.NewSQL(fake, workerid.WithDialect(sqllock.Postgres)); err != nil || l.Dialect() != sqllock.Postgres {
		t.Errorf("unknown driver, WithDialect: %v", err)
	}
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		ctx := ctxT(t, 30*time.Second)
		db := s.open(t, "")
		for name, opt := range map[string]workerid.Option{
			"negative max":    workerid.WithMax(-1),
			"huge max":        workerid.WithMax(1 << 22),
			"tiny ttl":        workerid.WithTTL(time.Millisecond),
			"zero checkpoint": workerid.WithCheckpoint(0),
			"empty table":     workerid.WithTable(""),
			"bad table":       workerid.WithTable("worker-node; DROP TABLE x"),
			"upper table":     workerid.WithTable("WORKER_NODE"),
			"bad dialect":     workerid.WithDialect(sqllock.Dialect(7)),
		} {
			if _, err := workerid.NewSQL(db, opt); !errors.Is(err, workerid.ErrInvalid) {
				t.Errorf("%s: want ErrInvalid, got %v", name, err)
			}
		}
		table := s.newTable(t)
		l := s.leaserOn(t, db, table, workerid.WithMax(2000))
		for _, svc := range []string{"", "a{b}", "a b", "a/b", strings.Repeat("x", 129)} {
			if _, err := l.Lease(ctx, svc); !errors.Is(err, workerid.ErrInvalid) {
				t.Errorf("service %q: want ErrInvalid, got %v", svc, err)
			}
			if _, err := l.List(ctx, svc); !errors.Is(err, workerid.ErrInvalid) {
				t.Errorf("List of service %q: want ErrInvalid, got %v", svc, err)
			}
		}
		for _, id := range []int64{-1, 2001} {
			if _, err := l.HighWater("svc", id); !errors.Is(err, workerid.ErrInvalid) {
				t.Errorf("HighWater of ID %d: want ErrInvalid, got %v", id, err)
			}
		}
		// A maximum of 2000 does not fit 10 worker bits.
		lease, err := l.Lease(ctx, "wide")
		if err != nil {
			t.Fatal(err)
		}
		release(t, lease)
		if _, err := lease.NewSnowflake(ctx, idgen.LayoutWorker10); !errors.Is(err, workerid.ErrInvalid) {
			t.Errorf("max out of the layout's range: want ErrInvalid, got %v", err)
		}
		// A corrupted high-water mark is an error, not a silent reset.
		s.exec(t, "UPDATE "+table+" SET high_water = -5 WHERE service = ? AND id = ?", "wide", lease.ID())
		if _, err := lease.NewSnowflake(ctx, idgen.LayoutSonyflake); err == nil || !strings.Contains(err.Error(), "not a valid mark") {
			t.Errorf("corrupted mark: %v", err)
		}

		// A missing table: ErrSchema, naming the table and how to make it.
		missing := s.leaserOn(t, db, "no_such_table")
		for name, call := range map[string]func() error{
			"Lease": func() error { _, err := missing.Lease(ctx, "svc"); return err },
			"List":  func() error { _, err := missing.List(ctx, "svc"); return err },
			"Load": func() error {
				hw, err := missing.HighWater("svc", 0)
				if err != nil {
					return err
				}
				_, err = hw.Load(ctx)
				return err
			},
		} {
			err := call()
			if !errors.Is(err, workerid.ErrSchema) || !strings.Contains(err.Error(), "no_such_table") ||
				!strings.Contains(err.Error(), "CreateSchema") || !strings.Contains(err.Error(), "CREATE TABLE IF NOT EXISTS no_such_table") {
				t.Errorf("%s on a missing table: %v", name, err)
			}
		}
		if err := missing.CreateSchema(ctx); err != nil {
			t.Fatal(err)
		}
		defer s.exec(t, "DROP TABLE no_such_table")
		if lease, err := missing.Lease(ctx, "svc"); err != nil {
			t.Errorf("Lease after CreateSchema: %v", err)
		} else {
			lease.Release(ctx)
		}
		if err := missing.CreateSchema(ctx); err != nil {
			t.Errorf("CreateSchema on an existing table: %v", err)
		}
	})
}

// TestSQLConcurrentLeasesAreDistinct: many leasers, each on a pool of its
// own as separate processes have, lease at once: every one gets an ID of
// its own, the lowest ones.
func TestSQLConcurrentLeasesAreDistinct(t *testing.T) {
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		ctx := ctxT(t, 60*time.Second)
		table := s.newTable(t)
		const n = 24
		ids := make(chan int64, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			l := s.leaser(t, table)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				lease, err := l.Lease(ctx, "orders")
				if err != nil {
					t.Error(err)
					return
				}
				release(t, lease)
				ids <- lease.ID()
			}()
		}
		close(start)
		wg.Wait()
		close(ids)
		seen := map[int64]bool{}
		for id := range ids {
			if seen[id] {
				t.Fatalf("worker ID %d leased twice", id)
			}
			seen[id] = true
		}
		for id := range int64(n) {
			if !seen[id] {
				t.Fatalf("worker ID %d not leased; got %v", id, seen)
			}
		}
	})
}

// TestSQLNoOverlap: leasers on pools of their own lease, hold briefly and
// release the few IDs of a service over and over; at no moment do two of
// them hold one ID (an in-process record of holders, set after Lease and
// cleared before Release, would see it).
func TestSQLNoOverlap(t *testing.T) {
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		ctx := ctxT(t, 60*time.Second)
		table := s.newTable(t)
		const (
			workers = 8
			maxID   = 2 // three IDs for eight workers
			rounds  = 25
		)
		var holding [maxID + 1]atomic.Int32
		var leased, exhausted atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			l := s.leaser(t, table, workerid.WithMax(maxID))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					lease, err := l.Lease(ctx, "churn")
					var ex *workerid.ExhaustedError
					if errors.As(err, &ex) {
						exhausted.Add(1)
						time.Sleep(time.Millisecond)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					if !holding[lease.ID()].CompareAndSwap(0, 1) {
						t.Errorf("worker ID %d leased while another leaser held it", lease.ID())
					}
					leased.Add(1)
					time.Sleep(time.Millisecond)
					holding[lease.ID()].Store(0)
					if err := lease.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if leased.Load() < rounds || exhausted.Load() == 0 {
			t.Fatalf("%d leases, %d exhausted: the IDs were not contended", leased.Load(), exhausted.Load())
		}
	})
}
