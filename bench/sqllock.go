package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/sqllock"
)

// The sqllock suite: coordkit's SQL locks against the floor of the same
// database, a SELECT 1 round trip, on MariaDB and PostgreSQL started for
// the suite (each on loopback, with the testserver's settings: MariaDB
// flushes its log once a second, PostgreSQL runs with fsync off, so
// commits cost what the server does, not the disk):
//
//	(a) uncontended: 16 goroutines, each lock+release of its own key,
//	    against 16 goroutines each doing SELECT 1, and each updating a row
//	    of its own (a lock+release writes twice: the floor of a write);
//	(b) hot key: 16 goroutines over 4 Clients (4 pools, as 4 processes),
//	    one key, each section checked for overlap, against one goroutine
//	    doing SELECT 1 (a hot key serializes its sections: a section can
//	    at best follow another after a round trip).

func init() { register(Suite{Name: "sqllock", Run: runSQLLock}) }

const (
	sqlGoroutines = 16
	sqlClients    = 4
)

type sqlBenchDB struct {
	name    string
	driver  string
	dsn     string
	dialect sqllock.Dialect
}

type sqlLocker struct {
	name  string
	lease bool
}

var sqlLockers = []sqlLocker{{"session lock", false}, {"lease table", true}}

func runSQLLock(env *Env) error {
	m, err := testserver.NewMariaDB()
	if err != nil {
		return err
	}
	defer m.Close()
	p, err := testserver.NewPostgres()
	if err != nil {
		return err
	}
	defer p.Close()
	dbs := []sqlBenchDB{
		{"MariaDB", "mysql", m.DSN("interpolateParams=true"), sqllock.MySQL},
		{"PostgreSQL", "pgx", p.DSN(), sqllock.Postgres},
	}
	ctx := context.Background()
	for _, d := range dbs {
		db, err := sql.Open(d.driver, d.dsn)
		if err != nil {
			return err
		}
		for _, l := range sqlLockers {
			c, err := newSQLLocker(db, d, l)
			if err != nil {
				return err
			}
			if err := c.CreateTable(ctx); err != nil {
				return err
			}
		}
		if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS bench_rows (id INT PRIMARY KEY, v BIGINT NOT NULL)"); err != nil {
			return err
		}
		for g := range sqlGoroutines {
			db.ExecContext(ctx, fmt.Sprintf("INSERT INTO bench_rows (id, v) VALUES (%d, 0)", g))
		}
		db.Close()
	}

	ta := &Table{
		Title: fmt.Sprintf("(a) uncontended: %d goroutines, each lock+release of its own key, vs %d goroutines each doing SELECT 1 (median of %d rounds of %v)",
			sqlGoroutines, sqlGoroutines, env.Rounds, env.Dur),
		Cols: []string{"database", "lock", "pairs/s", "SELECT 1/s", "vs SELECT 1", "UPDATE/s", "vs UPDATE"},
	}
	tb := &Table{
		Title: fmt.Sprintf("(b) hot key: %d goroutines over %d Clients (pools), one key, vs one goroutine doing SELECT 1 (median of %d rounds of %v)",
			sqlGoroutines, sqlClients, env.Rounds, env.Dur),
		Cols: []string{"database", "lock", "sections/s", "serial SELECT 1/s", "vs floor", "overlaps"},
	}
	for _, d := range dbs {
		var floorPar, floorSer, floorUpd []float64
		pairs := map[string][]float64{}
		hot := map[string][]float64{}
		overlaps := map[string]int64{}
		for round := 0; round < env.Rounds; round++ {
			f, err := sqlFloor(d, sqlGoroutines, env.Dur)
			if err != nil {
				return err
			}
			floorPar = append(floorPar, f)
			if f, err = sqlUpdateFloor(d, env.Dur); err != nil {
				return err
			}
			floorUpd = append(floorUpd, f)
			if f, err = sqlFloor(d, 1, env.Dur); err != nil {
				return err
			}
			floorSer = append(floorSer, f)
			for _, l := range sqlLockers {
				r, err := sqlUncontended(d, l, env.Dur)
				if err != nil {
					return fmt.Errorf("%s %s uncontended: %w", d.name, l.name, err)
				}
				pairs[l.name] = append(pairs[l.name], r)
				r, o, err := sqlHot(d, l, env.Dur)
				if err != nil {
					return fmt.Errorf("%s %s hot key: %w", d.name, l.name, err)
				}
				hot[l.name] = append(hot[l.name], r)
				overlaps[l.name] += o
			}
		}
		fp, fs, fu := Median(floorPar), Median(floorSer), Median(floorUpd)
		for _, l := range sqlLockers {
			pr := Median(pairs[l.name])
			ta.Row(d.name, l.name, pr, fp, Ratio(pr, fp), fu, Ratio(pr, fu))
			hr := Median(hot[l.name])
			tb.Row(d.name, l.name, hr, fs, Ratio(hr, fs), overlaps[l.name])
		}
	}
	ta.Print(env.Out)
	tb.Print(env.Out)
	fmt.Fprintln(env.Out, "A pair is two statements that each write a row (and, for the session lock, take or free the lock); the UPDATE floor is one autocommitted single-row UPDATE per call.")
	return nil
}

func newSQLLocker(db *sql.DB, d sqlBenchDB, l sqlLocker) (*sqllock.Client, error) {
	opts := []sqllock.Option{sqllock.WithLogger(slog.New(slog.DiscardHandler))}
	switch {
	case l.lease:
		return sqllock.NewLeaseTable(db, d.dialect, opts...)
	case d.dialect == sqllock.MySQL:
		return sqllock.NewMySQL(db, opts...)
	}
	return sqllock.NewPostgres(db, opts...)
}

func openBenchDB(d sqlBenchDB, conns int) (*sql.DB, error) {
	db, err := sql.Open(d.driver, d.dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db, nil
}

// sqlFloor returns the SELECT 1 round trips per second of n goroutines on
// one pool.
func sqlFloor(d sqlBenchDB, n int, dur time.Duration) (float64, error) {
	db, err := openBenchDB(d, n)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	return timed(n, dur, func(g int) (func() error, error) {
		return func() error {
			var one int
			return db.QueryRow("SELECT 1").Scan(&one)
		}, nil
	})
}

// sqlUpdateFloor returns the single-row UPDATEs per second of
// sqlGoroutines goroutines on one pool, each on its own row.
func sqlUpdateFloor(d sqlBenchDB, dur time.Duration) (float64, error) {
	db, err := openBenchDB(d, sqlGoroutines)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	return timed(sqlGoroutines, dur, func(g int) (func() error, error) {
		q := fmt.Sprintf("UPDATE bench_rows SET v = v + 1 WHERE id = %d", g)
		return func() error {
			_, err := db.Exec(q)
			return err
		}, nil
	})
}

// sqlUncontended returns the lock+release pairs per second of
// sqlGoroutines goroutines on one Client, each on its own key.
func sqlUncontended(d sqlBenchDB, l sqlLocker, dur time.Duration) (float64, error) {
	db, err := openBenchDB(d, sqlGoroutines)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	c, err := newSQLLocker(db, d, l)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx := context.Background()
	run := time.Now().UnixNano()
	return timed(sqlGoroutines, dur, func(g int) (func() error, error) {
		key := fmt.Sprintf("bench:%d:%d", run, g)
		return func() error {
			lease, err := c.Obtain(ctx, key)
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}, nil
	})
}

// sqlHot returns the sections per second of sqlGoroutines goroutines over
// sqlClients Clients on one key, and the number of sections that
// overlapped another.
func sqlHot(d sqlBenchDB, l sqlLocker, dur time.Duration) (float64, int64, error) {
	clients := make([]*sqllock.Client, sqlClients)
	for i := range clients {
		db, err := openBenchDB(d, sqlGoroutines)
		if err != nil {
			return 0, 0, err
		}
		defer db.Close()
		if clients[i], err = newSQLLocker(db, d, l); err != nil {
			return 0, 0, err
		}
		defer clients[i].Close()
	}
	key := fmt.Sprintf("bench:hot:%d", time.Now().UnixNano())
	ctx := context.Background()
	var inside atomic.Int32
	var overlaps atomic.Int64
	rate, err := timed(sqlGoroutines, dur, func(g int) (func() error, error) {
		c := clients[g%sqlClients]
		return func() error {
			return lock.Do(ctx, c, key, func(context.Context) error {
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				return nil
			})
		}, nil
	})
	return rate, overlaps.Load(), err
}

// timed runs n goroutines, each calling the op mk made for it in a loop for
// dur (after one untimed call), and returns the calls per second.
func timed(n int, dur time.Duration, mk func(g int) (func() error, error)) (float64, error) {
	ops := make([]func() error, n)
	for g := range ops {
		op, err := mk(g)
		if err != nil {
			return 0, err
		}
		if err := op(); err != nil { // warm up: connections, prepared statements, schema check
			return 0, err
		}
		ops[g] = op
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	end := start.Add(dur)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := int64(0)
			for time.Now().Before(end) {
				if err := ops[g](); err != nil {
					errs <- err
					return
				}
				k++
			}
			total.Add(k)
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(total.Load()) / time.Since(start).Seconds(), nil
}
