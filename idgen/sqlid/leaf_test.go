package sqlid_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen/sqlid"
)

// TestLeafHappyPath: a tag registered with max_id 1 and step 1000 hands out
// 1, 2, 3, … from one generator, segment after segment, and the row's
// max_id stays ahead of every ID handed out.
func TestLeafHappyPath(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		db := b.openDB(t)
		table := uniqueName(t)
		s := newLeaf(t, db, b.dialect, table)
		if err := s.Register(ctx, "order", 1, 1000, "orders"); err != nil {
			t.Fatal(err)
		}
		g, err := s.For("order")
		if err != nil {
			t.Fatal(err)
		}
		ids := draw(t, ctx, g, 5000)
		for i, id := range ids {
			if id != int64(i+1) {
				t.Fatalf("ID #%d = %d, want %d", i, id, i+1)
			}
		}
		st := g.Stats()
		if st.Fetches < 3 || st.Step < 1000 || st.High < 5000 {
			t.Fatalf("stats %+v", st)
		}
		var maxID, step int64
		if err := db.QueryRowContext(ctx, "SELECT max_id, step FROM "+table+" WHERE biz_tag = 'order'").Scan(&maxID, &step); err != nil {
			t.Fatal(err)
		}
		if maxID <= 5000 || step != 1000 {
			t.Fatalf("row: max_id %d step %d; want max_id above 5000 and the step untouched", maxID, step)
		}
		// Segments.Next draws from the same generator.
		id, err := s.Next(ctx, "order")
		if err != nil || id != 5001 {
			t.Fatalf("Segments.Next = %d, %v; want 5001", id, err)
		}
	})
}

// TestLeafConcurrent: 32 goroutines draw 400,000 IDs from one generator:
// no duplicate, each goroutine's IDs strictly increasing, and once the step
// has grown to the draw rate (after 1,280,000 IDs) no Next waits for the
// database.
func TestLeafConcurrent(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		const goroutines, perG = 32, 12_500
		ctx := ctxT(t)
		s := newLeaf(t, b.openDB(t), b.dialect, uniqueName(t))
		if err := s.Register(ctx, "order", 1, 1000, ""); err != nil {
			t.Fatal(err)
		}
		g, _ := s.For("order")
		// Warm-up: the step grows to fit the draw rate of 32 goroutines
		// (steady state: a segment lasts long enough for the prefetch).
		var warm sync.WaitGroup
		for range goroutines {
			warm.Go(func() { draw(t, ctx, g, 40_000) })
		}
		warm.Wait()
		waitFor(t, "prefetch", func() bool { return g.Stats().Ready })
		waits := g.Stats().Waits
		all := make([][]int64, goroutines)
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for i := range goroutines {
			wg.Go(func() {
				ids := make([]int64, perG)
				for k := range ids {
					id, err := g.Next(ctx)
					if err != nil {
						errs <- err
						return
					}
					ids[k] = id
				}
				all[i] = ids
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var flat []int64
		for _, ids := range all {
			increasing(t, ids)
			flat = append(flat, ids...)
		}
		noDuplicates(t, flat)
		if w := g.Stats().Waits - waits; w != 0 {
			t.Errorf("%d Next calls waited for the database in steady state", w)
		}
	})
}

// TestLeafTwoProcesses: two registries on separate pools (two processes)
// draw from the same tag, 8 goroutines each: no ID is handed out twice,
// and each generator's IDs increase.
func TestLeafTwoProcesses(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		const goroutines, perG = 8, 20_000
		ctx := ctxT(t)
		table := uniqueName(t)
		s1 := newLeaf(t, b.openDB(t), b.dialect, table)
		s2 := newLeaf(t, b.openDB(t), b.dialect, table)
		if err := s1.Register(ctx, "user", 100, 500, ""); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var all []int64
		var wg sync.WaitGroup
		for _, s := range []*sqlid.Segments{s1, s2} {
			g, _ := s.For("user")
			for range goroutines {
				wg.Go(func() {
					ids := draw(t, ctx, g, perG)
					increasing(t, ids)
					mu.Lock()
					all = append(all, ids...)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		if len(all) != 2*goroutines*perG {
			t.Fatalf("%d IDs", len(all))
		}
		noDuplicates(t, all)
		if all[0] < 100 {
			t.Fatalf("lowest ID %d, below the registered max_id 100", all[0])
		}
	})
}

// TestLeafCompatible: Leaf's own servers and this package share a row. A
// "Leaf server" runs Leaf's statements (UPDATE ... SET max_id = max_id +
// step, then SELECT, in one transaction; IDs [max_id-step, max_id)) between
// the fetches of a generator: no ID is handed out by both.
func TestLeafCompatible(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		db := b.openDB(t)
		table := uniqueName(t)
		s := newLeaf(t, db, b.dialect, table)
		if err := s.Register(ctx, "leaf", 1, 100, ""); err != nil {
			t.Fatal(err)
		}
		g, _ := s.For("leaf")
		arg := "?"
		if b.dialect == sqlid.Postgres {
			arg = "$1"
		}
		var all []int64
		for range 20 {
			all = append(all, draw(t, ctx, g, 150)...)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET max_id = max_id + step WHERE biz_tag = "+arg, "leaf"); err != nil {
				t.Fatal(err)
			}
			var maxID, step int64
			if err := tx.QueryRowContext(ctx, "SELECT max_id, step FROM "+table+" WHERE biz_tag = "+arg, "leaf").Scan(&maxID, &step); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			for id := maxID - step; id < maxID; id++ {
				all = append(all, id)
			}
		}
		noDuplicates(t, all)
	})
}

// TestLeafAdaptiveStep drives the step with a fake clock: the first segment
// has the row's step; the step doubles while segments last less than the
// target, up to the bound, and halves, never below the row's step, when
// they last twice the target or more.
func TestLeafAdaptiveStep(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		var mu sync.Mutex
		now := time.Unix(1_700_000_000, 0)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		s := newLeaf(t, b.openDB(t), b.dialect, uniqueName(t),
			sqlid.WithMaxStep(8000), sqlid.WithTargetInterval(15*time.Minute), sqlid.WithClock(clock))
		if err := s.Register(ctx, "adapt", 1, 1000, ""); err != nil {
			t.Fatal(err)
		}
		g, _ := s.For("adapt")
		// Segments of 1000, 2000, 4000: each prefetch comes at once.
		draw(t, ctx, g, 1000+2000+4000)
		if st := g.Stats(); st.Step != 8000 {
			t.Fatalf("step after fast segments = %d, want 8000", st.Step)
		}
		draw(t, ctx, g, 1) // into the 8000 segment
		advance(45 * time.Minute)
		draw(t, ctx, g, 8000) // its prefetch sees 45 minutes since the last fetch
		if st := g.Stats(); st.Step != 4000 {
			t.Fatalf("step after a slow segment = %d, want 4000", st.Step)
		}
		advance(20 * time.Minute) // between target and twice the target: unchanged
		draw(t, ctx, g, 4000)
		if st := g.Stats(); st.Step != 4000 {
			t.Fatalf("step after a segment on target = %d, want 4000", st.Step)
		}
		for range 4 { // slow segments halve the step down to the row's step, no further
			advance(time.Hour)
			draw(t, ctx, g, int(g.Stats().Step))
		}
		if st := g.Stats(); st.Step != 1000 {
			t.Fatalf("step after slow segments = %d, want the row's 1000", st.Step)
		}
	})
}

// TestLeafRestoredBackup: the row's max_id set back by hand (a database
// restored from an older backup) while a generator serves: its next fetch
// finds the range below the IDs it handed out, raises max_id past them and
// serves above; no ID repeats in this process.
func TestLeafRestoredBackup(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		db := b.openDB(t)
		table := uniqueName(t)
		s := newLeaf(t, db, b.dialect, table)
		if err := s.Register(ctx, "order", 1, 1000, ""); err != nil {
			t.Fatal(err)
		}
		g, _ := s.For("order")
		ids := draw(t, ctx, g, 500)
		waitFor(t, "prefetch", func() bool { return g.Stats().Ready })
		if _, err := db.ExecContext(ctx, "UPDATE "+table+" SET max_id = 1"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, draw(t, ctx, g, 10_000)...)
		increasing(t, ids)
		if st := g.Stats(); st.Rollbacks == 0 {
			t.Fatalf("no rollback counted: %+v", st)
		}
	})
}

// TestLeafClose: after Close the segments in memory are still served, then
// Next returns ErrClosed; For returns ErrClosed for a new tag.
func TestLeafClose(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		s := newLeaf(t, b.openDB(t), b.dialect, uniqueName(t), sqlid.WithMaxStep(1000))
		if err := s.Register(ctx, "c", 1, 1000, ""); err != nil {
			t.Fatal(err)
		}
		g, _ := s.For("c")
		draw(t, ctx, g, 100) // the prefetch point (10 %)
		waitFor(t, "prefetch", func() bool { return g.Stats().Ready })
		s.Close()
		served := 100
		var err error
		for ; served < 5000; served++ {
			if _, err = g.Next(ctx); err != nil {
				break
			}
		}
		if served != 2000 || !errors.Is(err, sqlid.ErrClosed) {
			t.Fatalf("after Close: served %d IDs in all, then %v; want 2000 (two segments), then ErrClosed", served, err)
		}
		if _, err := s.For("other"); !errors.Is(err, sqlid.ErrClosed) {
			t.Fatalf("For after Close: %v", err)
		}
	})
}

// TestLeafNoAllocs: Next from memory does not allocate.
func TestLeafNoAllocs(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		s := newLeaf(t, b.openDB(t), b.dialect, uniqueName(t), sqlid.WithMaxStep(1_000_000))
		if err := s.Register(ctx, "alloc", 1, 1_000_000, ""); err != nil {
			t.Fatal(err)
		}
		g, _ := s.For("alloc")
		draw(t, ctx, g, 200_000) // past the prefetch point (10 %)
		waitFor(t, "prefetch", func() bool { return g.Stats().Fetches == 2 })
		if n := testing.AllocsPerRun(10_000, func() { g.Next(ctx) }); n != 0 {
			t.Errorf("Segment.Next allocates %v times per call", n)
		}
		if n := testing.AllocsPerRun(10_000, func() { s.Next(ctx, "alloc") }); n != 0 {
			t.Errorf("Segments.Next allocates %v times per call", n)
		}
	})
}
