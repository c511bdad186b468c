package sqlid_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/sqlid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// newTinyid returns Tinyid generators over stores and a table of the
// test's own, created, closed when the test ends.
func newTinyid(t testing.TB, stores []sqlid.Store, table string, opts ...sqlid.Option) *sqlid.Segments {
	t.Helper()
	s, err := sqlid.NewTinyid(stores, append([]sqlid.Option{quiet, sqlid.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateTable(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return s
}

// twoStores is MariaDB (database 0) and PostgreSQL (database 1): a Tinyid
// generator does not care that they differ.
func twoStores(t testing.TB) []sqlid.Store {
	return []sqlid.Store{
		{DB: backends[0].openDB(t), Dialect: sqlid.MySQL},
		{DB: backends[1].openDB(t), Dialect: sqlid.Postgres},
	}
}

// TestTinyidOneDatabase: Tinyid's table in one database, registered with
// max_id 0, delta 1: IDs 1, 2, 3, … (Tinyid's convention: the values in
// (old max_id, new max_id]); the row's version moves with every fetch, so
// Tinyid's own servers, which compare and set on it, see the change.
func TestTinyidOneDatabase(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		db := b.openDB(t)
		table := uniqueName(t)
		s := newTinyid(t, []sqlid.Store{{DB: db, Dialect: b.dialect}}, table)
		if err := s.Register(ctx, "test", 0, 1000, ""); err != nil {
			t.Fatal(err)
		}
		g, _ := s.For("test")
		ids := draw(t, ctx, g, 3000)
		for i, id := range ids {
			if id != int64(i+1) {
				t.Fatalf("ID #%d = %d, want %d", i, id, i+1)
			}
		}
		// The last segment's draws started the prefetch of the next one:
		// wait until it is in memory, so that no fetch is under way (none
		// starts while one is ready and nobody draws) when the row and the
		// counters are read. Read at once, the row could miss a fetch that
		// Stats counted a moment later.
		waitFor(t, "prefetch", func() bool { return g.Stats().Ready })
		var version int64
		if err := db.QueryRowContext(ctx, "SELECT version FROM "+table+" WHERE biz_type = 'test'").Scan(&version); err != nil {
			t.Fatal(err)
		}
		if st := g.Stats(); version != 1+st.Fetches {
			t.Fatalf("version %d after %d fetches (registered at 1)", version, st.Fetches)
		}
	})
}

// TestTinyidDeltaRemainder: a row with Tinyid's delta 3 and remainder 2
// (set by hand, as Tinyid's operators do) hands out only 2, 5, 8, …
func TestTinyidDeltaRemainder(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		db := b.openDB(t)
		table := uniqueName(t)
		s := newTinyid(t, []sqlid.Store{{DB: db, Dialect: b.dialect}}, table)
		if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" (biz_type, begin_id, max_id, step, delta, remainder, version) VALUES ('odd', 1, 1, 100, 3, 2, 1)"); err != nil {
			t.Fatal(err)
		}
		g, _ := s.For("odd")
		ids := draw(t, ctx, g, 500)
		for i, id := range ids {
			if want := int64(2 + 3*i); id != want {
				t.Fatalf("ID #%d = %d, want %d", i, id, want)
			}
		}
	})
}

// TestTinyidTwoDatabases: one tag over MariaDB (remainder 0) and
// PostgreSQL (remainder 1), delta 2, 16 goroutines: no duplicate, and both
// databases serve.
func TestTinyidTwoDatabases(t *testing.T) {
	ctx := ctxT(t)
	s := newTinyid(t, twoStores(t), uniqueName(t))
	if err := s.Register(ctx, "order", 0, 1000, ""); err != nil {
		t.Fatal(err)
	}
	g, _ := s.For("order")
	var mu sync.Mutex
	var all []int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			ids := draw(t, ctx, g, 20_000)
			mu.Lock()
			all = append(all, ids...)
			mu.Unlock()
		})
	}
	wg.Wait()
	noDuplicates(t, all)
	for i := range 2 {
		if st, _ := g.StoreStats(i); st.Fetches == 0 {
			t.Fatalf("database %d fetched nothing: %+v", i, st)
		}
	}
}

// TestTinyidOneDown: one tag over MariaDB and PostgreSQL; each database in
// turn is killed (then paused) while 8 goroutines draw: the other keeps
// serving, so no Next fails; after the killed one is back, it serves
// again; IDs never repeat.
func TestTinyidOneDown(t *testing.T) {
	ctx := ctxT(t)
	keepRunning(t, maria)
	keepRunning(t, pg)
	// A fetch timeout of 3 s: with 1 s, a fetch from the database still up
	// timed out on a starved host (make test-stress) while the other was
	// killed, and Next rightly failed with both databases failing.
	s := newTinyid(t, twoStores(t), uniqueName(t),
		sqlid.WithFetchTimeout(3*time.Second), sqlid.WithRetryDelay(100*time.Millisecond), sqlid.WithMaxStep(2000))
	if err := s.Register(ctx, "order", 0, 1000, ""); err != nil {
		t.Fatal(err)
	}
	g, _ := s.For("order")
	draw(t, ctx, g, 1) // both databases fetch their first segment
	waitFor(t, "first segments", func() bool {
		a, _ := g.StoreStats(0)
		b, _ := g.StoreStats(1)
		return a.Fetches > 0 && b.Fetches > 0
	})
	var all []int64
	phase := func(name string, n int, fault func(), onlyResidue int64) {
		t.Helper()
		fault()
		var mu sync.Mutex
		var wg sync.WaitGroup
		var bad error
		for range 8 {
			wg.Go(func() {
				ids := make([]int64, 0, n)
				for range n {
					cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					id, err := g.Next(cctx)
					cancel()
					if err != nil {
						mu.Lock()
						bad = err
						mu.Unlock()
						return
					}
					ids = append(ids, id)
				}
				mu.Lock()
				all = append(all, ids...)
				mu.Unlock()
				if onlyResidue >= 0 {
					for _, id := range ids[len(ids)/2:] { // the tail: the dead database's memory used up long before
						if id%2 != onlyResidue {
							mu.Lock()
							bad = errors.New("an ID from the database that is down")
							mu.Unlock()
							return
						}
					}
				}
			})
		}
		wg.Wait()
		if bad != nil {
			t.Fatalf("%s: %v", name, bad)
		}
	}
	phase("MariaDB killed", 25_000, maria.Kill, 1)
	phase("MariaDB back", 5_000, func() {
		if err := maria.Start(); err != nil {
			t.Fatal(err)
		}
	}, -1)
	waitFor(t, "MariaDB serving again", func() bool {
		_, err := draw1(g)
		st, _ := g.StoreStats(0)
		return err == nil && st.Ready
	})
	phase("PostgreSQL paused", 25_000, func() {
		if err := pg.Pause(); err != nil {
			t.Fatal(err)
		}
	}, 0)
	if err := pg.Resume(); err != nil {
		t.Fatal(err)
	}
	phase("PostgreSQL back", 5_000, func() {}, -1)
	noDuplicates(t, all)
}

func draw1(g *sqlid.Segment) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return g.Next(ctx)
}

// TestTinyidAllDown: with every database down, Next serves what is in
// memory, then fails with one *StoreError per database; it serves again
// once one is back.
func TestTinyidAllDown(t *testing.T) {
	ctx := ctxT(t)
	keepRunning(t, maria)
	keepRunning(t, pg)
	s := newTinyid(t, twoStores(t), uniqueName(t),
		sqlid.WithFetchTimeout(time.Second), sqlid.WithRetryDelay(100*time.Millisecond), sqlid.WithMaxStep(1000))
	if err := s.Register(ctx, "order", 0, 1000, ""); err != nil {
		t.Fatal(err)
	}
	g, _ := s.For("order")
	ids := draw(t, ctx, g, 1)
	waitFor(t, "first segments", func() bool {
		a, _ := g.StoreStats(0)
		b, _ := g.StoreStats(1)
		return a.Fetches > 0 && b.Fetches > 0
	})
	maria.Kill()
	pg.Kill()
	var err error
	for range 10_000 {
		var id int64
		if id, err = draw1(g); err != nil {
			break
		}
		ids = append(ids, id)
	}
	var se *sqlid.StoreError
	if err == nil || !errors.As(err, &se) {
		t.Fatalf("with every database down: %v", err)
	}
	t.Logf("%d IDs from memory, then: %v", len(ids), err)
	if len(ids) > 4000 || len(ids) < 1000 {
		t.Fatalf("%d IDs served from memory (each database holds at most two segments of 500)", len(ids))
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "PostgreSQL serving", func() bool {
		id, err := draw1(g)
		if err == nil {
			ids = append(ids, id)
		}
		return err == nil
	})
	noDuplicates(t, ids)
}

// conflictMetrics records the errors of segment fetches.
type conflictMetrics struct {
	idgen.NopMetrics
	mu   sync.Mutex
	errs []error
}

func (m *conflictMetrics) SegmentFetched(_ string, _ int64, _ time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.errs = append(m.errs, err)
	}
}

// TestTinyidConflict: two databases whose rows hand out the same series
// (both delta 1, remainder 0: registered one by one instead of together):
// the second database's segment is refused with ErrConflict and never
// served.
func TestTinyidConflict(t *testing.T) {
	ctx := ctxT(t)
	stores := twoStores(t)
	table := uniqueName(t)
	for _, st := range stores {
		one := newTinyid(t, []sqlid.Store{st}, table)
		if err := one.Register(ctx, "dup", 0, 1000, ""); err != nil {
			t.Fatal(err)
		}
	}
	m := &conflictMetrics{}
	s := newTinyid(t, stores, table, sqlid.WithMetrics(m))
	g, _ := s.For("dup")
	ids := draw(t, ctx, g, 1)
	waitFor(t, "both fetches", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.errs) > 0
	})
	ids = append(ids, draw(t, ctx, g, 5000)...)
	noDuplicates(t, ids)
	// The first database to answer serves; the other is refused.
	a, _ := g.StoreStats(0)
	b, _ := g.StoreStats(1)
	loser := 1
	if a.Fetches == 0 {
		loser = 0
	}
	if (a.Fetches == 0) == (b.Fetches == 0) {
		t.Fatalf("fetches: database 0 %d, database 1 %d; want exactly one refused", a.Fetches, b.Fetches)
	}
	m.mu.Lock()
	err := m.errs[0]
	m.mu.Unlock()
	var se *sqlid.StoreError
	if !errors.Is(err, sqlid.ErrConflict) || !errors.As(err, &se) || se.Index != loser {
		t.Fatalf("fetch error %v; want ErrConflict from database %d", err, loser)
	}
	t.Logf("refused: %v", err)
}

// TestTinyidRegisterTwo: Register on two databases gives database i delta
// 2 and remainder i.
func TestTinyidRegisterTwo(t *testing.T) {
	ctx := ctxT(t)
	stores := twoStores(t)
	table := uniqueName(t)
	s := newTinyid(t, stores, table)
	if err := s.Register(ctx, "r", 10, 100, ""); err != nil {
		t.Fatal(err)
	}
	for i, st := range stores {
		var begin, maxID, step, delta, rem int64
		if err := st.DB.QueryRowContext(ctx, "SELECT begin_id, max_id, step, delta, remainder FROM "+table+" WHERE biz_type = 'r'").
			Scan(&begin, &maxID, &step, &delta, &rem); err != nil {
			t.Fatal(err)
		}
		if begin != 10 || maxID != 10 || step != 100 || delta != 2 || rem != int64(i) {
			t.Fatalf("database %d: begin %d max %d step %d delta %d remainder %d", i, begin, maxID, step, delta, rem)
		}
	}
	err := s.Register(ctx, "r", 10, 100, "")
	var se *sqlid.StoreError
	if !errors.Is(err, sqlid.ErrTagExists) || !errors.As(err, &se) {
		t.Fatalf("Register again: %v", err)
	}
	var _ *sql.DB = stores[0].DB
}

// TestTinyidRefillsInBackground: a database whose fetch failed is tried
// again in the background (every WithRetryDelay) until its buffer is
// refilled, not only when the other databases run dry: once it is back it
// has IDs in memory again, ready for the next outage of another, while the
// other database serves every call.
func TestTinyidRefillsInBackground(t *testing.T) {
	ctx := ctxT(t)
	p := testserver.StartProxy(t, maria.Addr())
	stores := []sqlid.Store{
		{DB: openDB(t, "mysql", maria.DSNAt(p.Addr())), Dialect: sqlid.MySQL},
		{DB: backends[1].openDB(t), Dialect: sqlid.Postgres},
	}
	s := newTinyid(t, stores, uniqueName(t),
		sqlid.WithFetchTimeout(500*time.Millisecond), sqlid.WithRetryDelay(100*time.Millisecond), sqlid.WithMaxStep(1000))
	if err := s.Register(ctx, "order", 0, 1000, ""); err != nil {
		t.Fatal(err)
	}
	g, _ := s.For("order")
	draw(t, ctx, g, 1)
	waitFor(t, "first segments", func() bool {
		a, _ := g.StoreStats(0)
		b, _ := g.StoreStats(1)
		return a.Fetches > 0 && b.Fetches > 0
	})
	p.SetDropNew(true)
	p.Cut() // MariaDB unreachable: its next fetches fail
	for {
		// Draw until MariaDB's memory is used up and PostgreSQL (odd IDs:
		// database 1 of 2) serves.
		id, err := draw1(g)
		if err != nil {
			t.Fatal(err)
		}
		if id%2 == 1 {
			if st, _ := g.StoreStats(0); !st.Ready {
				break
			}
		}
	}
	p.SetDropNew(false)
	// PostgreSQL keeps serving (a few IDs now and then, far from using up
	// its segments): MariaDB's buffer must refill by itself.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := draw1(g); err != nil {
			t.Fatal(err)
		}
		if st, _ := g.StoreStats(0); st.Ready {
			break
		}
		if time.Now().After(deadline) {
			st, _ := g.StoreStats(0)
			t.Fatalf("MariaDB's buffer not refilled 10 s after it was reachable again: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTinyidRefillPaced: the background retries of a database that is down
// are one loop per database, RetryDelay apart, however many callers failed
// meanwhile; and an error that only an operator can mend (a tag without a
// row there) is not retried in the background at all.
func TestTinyidRefillPaced(t *testing.T) {
	ctx := ctxT(t)
	table := uniqueName(t)
	pm := testserver.StartProxy(t, maria.Addr())
	pp := testserver.StartProxy(t, pg.Addr())
	stores := []sqlid.Store{
		{DB: openDB(t, "mysql", maria.DSNAt(pm.Addr())), Dialect: sqlid.MySQL},
		{DB: openDB(t, "pgx", pg.DSNAt(pp.Addr())), Dialect: sqlid.Postgres},
	}
	m := &conflictMetrics{}
	const retry = 50 * time.Millisecond
	s := newTinyid(t, stores, table, sqlid.WithMetrics(m),
		sqlid.WithFetchTimeout(500*time.Millisecond), sqlid.WithRetryDelay(retry), sqlid.WithMaxStep(1000))
	if err := s.Register(ctx, "order", 0, 1000, ""); err != nil {
		t.Fatal(err)
	}
	g, _ := s.For("order")
	draw(t, ctx, g, 1)
	failures := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.errs)
	}
	for _, p := range []*testserver.Proxy{pm, pp} {
		p.SetDropNew(true)
		p.Cut()
	}
	// Both down: callers use up what is in memory, then fail, 200 times.
	for fails := 0; fails < 200; {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := g.Next(cctx)
		cancel()
		if err != nil {
			fails++
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(2 * retry) // the callers' own fetches end
	before := failures()
	time.Sleep(time.Second)
	// One loop per database: about 2 × 1 s / retry, each fetch failing at once.
	if n := failures() - before; n > 2*int(time.Second/retry)+10 {
		t.Fatalf("%d failed fetches in the second after the callers stopped; one retry per database every %v makes about %d",
			n, retry, 2*int(time.Second/retry))
	}
	for _, p := range []*testserver.Proxy{pm, pp} {
		p.SetDropNew(false)
	}
	waitFor(t, "both databases refilled", func() bool {
		a, _ := g.StoreStats(0)
		b, _ := g.StoreStats(1)
		return a.Ready && b.Ready
	})

	// A tag with a row on PostgreSQL only: MariaDB answers ErrUnknownTag,
	// which the background does not retry.
	one := newTinyid(t, stores[1:], table)
	if err := one.Register(ctx, "pgonly", 0, 1000, ""); err != nil {
		t.Fatal(err)
	}
	g2, _ := s.For("pgonly")
	draw(t, ctx, g2, 1)
	time.Sleep(2 * retry)
	before = failures()
	time.Sleep(10 * retry)
	if n := failures() - before; n != 0 {
		t.Fatalf("%d background fetches of a tag MariaDB has no row for (ErrUnknownTag is not retried in the background)", n)
	}
}
