package sqlid_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen/sqlid"
)

// faultSetup registers a tag with a fixed step of 1000 and draws up to the
// prefetch point, so that 900 + 1000 IDs are in memory.
func faultSetup(t *testing.T, b backend) (*sqlid.Segment, []int64) {
	t.Helper()
	ctx := ctxT(t)
	s := newLeaf(t, b.openDB(t), b.dialect, uniqueName(t),
		sqlid.WithMaxStep(1000), sqlid.WithFetchTimeout(time.Second))
	if err := s.Register(ctx, "order", 1, 1000, ""); err != nil {
		t.Fatal(err)
	}
	g, _ := s.For("order")
	ids := draw(t, ctx, g, 100)
	waitFor(t, "prefetch", func() bool { return g.Stats().Ready })
	return g, ids
}

// drainUntilError draws until Next fails and returns the IDs and the error.
func drainUntilError(t *testing.T, g *sqlid.Segment, limit int) ([]int64, error) {
	t.Helper()
	var ids []int64
	for range limit {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		id, err := g.Next(ctx)
		cancel()
		if err != nil {
			return ids, err
		}
		ids = append(ids, id)
	}
	t.Fatalf("%d IDs served with the database down", limit)
	return nil, nil
}

// recover draws until Next succeeds again (within 60 s), then n more IDs.
func recoverDraw(t *testing.T, g *sqlid.Segment, n int) []int64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		id, err := g.Next(ctx)
		cancel()
		if err == nil {
			return append([]int64{id}, draw(t, ctxT(t), g, n-1)...)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery within 60s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkDownError fails t unless err is a failure of the database, not bad
// input and not a panic's leftovers.
func checkDownError(t *testing.T, err error) {
	t.Helper()
	if err == nil || errors.Is(err, sqlid.ErrInvalid) || errors.Is(err, sqlid.ErrClosed) || errors.Is(err, sqlid.ErrBadRow) {
		t.Fatalf("error with the database down: %v", err)
	}
	t.Logf("with the database down: %v", err)
}

// TestLeafDatabaseKilled: the database killed while a generator serves:
// both buffers (1900 IDs) are served from memory, then Next fails with the
// connection's error; when the database is back, the generator serves
// again, above every ID it handed out.
func TestLeafDatabaseKilled(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		keepRunning(t, b.server())
		g, ids := faultSetup(t, b)
		b.server().Kill()
		more, err := drainUntilError(t, g, 10_000)
		if len(more) != 1900 {
			t.Fatalf("served %d IDs with the database down, want the 1900 in memory", len(more))
		}
		checkDownError(t, err)
		if err := b.server().Start(); err != nil {
			t.Fatal(err)
		}
		ids = append(append(ids, more...), recoverDraw(t, g, 3000)...)
		increasing(t, ids)
	})
}

// TestLeafDatabasePaused: the database stopped with SIGSTOP (connections
// open, nothing answers): the 1900 IDs in memory are served, then Next
// fails once the fetch times out (WithFetchTimeout: 1 s); after SIGCONT the
// generator serves again.
func TestLeafDatabasePaused(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		keepRunning(t, b.server())
		g, ids := faultSetup(t, b)
		if err := b.server().Pause(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		more, err := drainUntilError(t, g, 10_000)
		took := time.Since(start)
		if len(more) != 1900 {
			t.Fatalf("served %d IDs with the database paused, want the 1900 in memory", len(more))
		}
		checkDownError(t, err)
		if took > 10*time.Second {
			t.Fatalf("Next failed after %v; the fetch timeout is 1s", took)
		}
		if err := b.server().Resume(); err != nil {
			t.Fatal(err)
		}
		ids = append(append(ids, more...), recoverDraw(t, g, 3000)...)
		increasing(t, ids)
	})
}

// TestLeafDatabaseRestarted: 8 goroutines on each of two generators
// (processes) draw while the database restarts (a crash and recovery):
// errors while it is down are fine, but no ID is handed out twice, each
// goroutine's IDs increase, and both generators serve again afterwards.
func TestLeafDatabaseRestarted(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		keepRunning(t, b.server())
		ctx := ctxT(t)
		table := uniqueName(t)
		var gens []*sqlid.Segment
		for i := range 2 {
			s := newLeaf(t, b.openDB(t), b.dialect, table, sqlid.WithMaxStep(2000), sqlid.WithFetchTimeout(time.Second))
			if i == 0 {
				if err := s.Register(ctx, "order", 1, 500, ""); err != nil {
					t.Fatal(err)
				}
			}
			g, _ := s.For("order")
			gens = append(gens, g)
		}
		var (
			stop    atomic.Bool
			mu      sync.Mutex
			all     []int64
			failed  atomic.Int64
			wg      sync.WaitGroup
			servedA atomic.Int64 // IDs served after the restart
			after   atomic.Bool
		)
		for _, g := range gens {
			for range 8 {
				wg.Go(func() {
					var ids []int64
					for !stop.Load() {
						cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
						id, err := g.Next(cctx)
						cancel()
						if err != nil {
							failed.Add(1)
							time.Sleep(10 * time.Millisecond)
							continue
						}
						ids = append(ids, id)
						if after.Load() {
							servedA.Add(1)
						}
					}
					increasing(t, ids)
					mu.Lock()
					all = append(all, ids...)
					mu.Unlock()
				})
			}
		}
		time.Sleep(300 * time.Millisecond)
		if err := b.server().Restart(); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
		after.Store(true)
		waitFor(t, "IDs after the restart", func() bool { return servedA.Load() > 20_000 })
		time.Sleep(300 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		noDuplicates(t, all)
		for i, g := range gens {
			if _, err := g.Next(ctx); err != nil {
				t.Fatalf("generator %d after the restart: %v", i, err)
			}
		}
		t.Logf("%d IDs, %d failed calls while the database was down", len(all), failed.Load())
	})
}
