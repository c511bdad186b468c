package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/coordkit/coordkit/idgen/sqlid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// The sqlid suite: IDs per second from 1 and 32 goroutines for Leaf's
// segments (memory, a reservation per segment in the background) against
// the same database's one-row-per-ID rate (Flickr's ticket server:
// REPLACE + SELECT LAST_INSERT_ID() on MariaDB, nextval on PostgreSQL), on
// MariaDB and PostgreSQL started for the suite with the testserver's
// settings; and Tinyid's segments over both databases at once. The
// segments' Next calls that waited for the database during the timed
// rounds are counted: none should in steady state.
func init() { register(Suite{Name: "sqlid", Run: runSQLID}) }

func runSQLID(env *Env) error {
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
	ctx := context.Background()
	quiet := sqlid.WithLogger(slog.New(slog.DiscardHandler))

	type dbSpec struct {
		name    string
		driver  string
		dsn     string
		dialect sqlid.Dialect
	}
	specs := []dbSpec{
		{"MariaDB", "mysql", m.DSN(), sqlid.MySQL},
		{"PostgreSQL", "pgx", p.DSN(), sqlid.Postgres},
	}
	type gen struct {
		db, name string
		next     func(context.Context) (int64, error)
		stats    func() (waits int64) // segments only
		warm     bool
	}
	var gens []gen
	var stores []sqlid.Store
	for _, s := range specs {
		db, err := sql.Open(s.driver, s.dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		db.SetMaxIdleConns(64)
		stores = append(stores, sqlid.Store{DB: db, Dialect: s.dialect})
		leaf, err := sqlid.NewLeaf(db, s.dialect, quiet)
		if err != nil {
			return err
		}
		defer leaf.Close()
		if err := leaf.CreateTable(ctx); err != nil {
			return err
		}
		if err := leaf.Register(ctx, "order", 1, 1000, "bench"); err != nil {
			return err
		}
		g, _ := leaf.For("order")
		tk, err := sqlid.NewTickets(db, s.dialect)
		if err != nil {
			return err
		}
		if err := tk.CreateSchema(ctx); err != nil {
			return err
		}
		gens = append(gens,
			gen{s.name, "(a) Leaf segments (memory)", g.Next, func() int64 { return g.Stats().Waits }, true},
			gen{s.name, "(b) ticket per ID (" + map[sqlid.Dialect]string{sqlid.MySQL: "REPLACE + LAST_INSERT_ID", sqlid.Postgres: "nextval"}[s.dialect] + ")", tk.Next, nil, false})
	}
	tiny, err := sqlid.NewTinyid(stores, quiet)
	if err != nil {
		return err
	}
	defer tiny.Close()
	if err := tiny.CreateTable(ctx); err != nil {
		return err
	}
	if err := tiny.Register(ctx, "order", 0, 1000, "bench"); err != nil {
		return err
	}
	tg, _ := tiny.For("order")
	gens = append(gens, gen{"both", "(c) Tinyid segments, 2 databases (memory)", tg.Next, func() int64 { return tg.Stats().Waits }, true})

	workers := []int{1, 32}
	t := Table{
		Title: fmt.Sprintf("IDs/s, median of %d rounds of %v, MariaDB and PostgreSQL on loopback, GOMAXPROCS=%d",
			env.Rounds, env.Dur, runtime.GOMAXPROCS(0)),
		Cols: []string{"database", "generator", "1 goroutine", "32 goroutines", "vs ticket per ID (32)", "Next calls that waited for the database (timed rounds)"},
	}
	res := make([][]float64, len(gens))
	waited := make([]int64, len(gens))
	for i, g := range gens {
		if g.warm { // the step grows to fit the draw rate; the prefetch lands
			if _, err := rate(ctx, 32, env.Dur, g.next); err != nil {
				return fmt.Errorf("%s %s: %w", g.db, g.name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		res[i] = make([]float64, len(workers))
		for j, w := range workers {
			var xs []float64
			for range env.Rounds {
				var w0 int64
				if g.stats != nil {
					w0 = g.stats()
				}
				r, err := rate(ctx, w, env.Dur, g.next)
				if err != nil {
					return fmt.Errorf("%s %s: %w", g.db, g.name, err)
				}
				if g.stats != nil {
					waited[i] += g.stats() - w0
				}
				xs = append(xs, r)
			}
			res[i][j] = Median(xs)
		}
	}
	for i, g := range gens {
		base := res[i][1]
		var vs any = "—"
		var waits any = "—"
		if g.stats != nil {
			waits = waited[i]
			for k, h := range gens {
				if h.db == g.db && h.stats == nil {
					vs = Ratio(base, res[k][1])
				}
			}
			if g.db == "both" {
				// against the faster of the two databases' tickets
				var best float64
				for k, h := range gens {
					if h.stats == nil {
						best = max(best, res[k][1])
					}
				}
				vs = Ratio(base, best)
			}
		}
		t.Row(g.db, g.name, res[i][0], res[i][1], vs, waits)
	}
	t.Print(env.Out)
	return nil
}
