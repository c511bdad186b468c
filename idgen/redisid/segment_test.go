package redisid_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// newSegments returns a registry closed when t ends.
func newSegments(t testing.TB, rdb redis.UniversalClient, opts ...redisid.Option) *redisid.Segments {
	t.Helper()
	s, err := redisid.NewSegments(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSegmentsConcurrentClients: 8 goroutines on each of 3 registries with
// their own clients draw 3,000,000 IDs from one tag: no duplicate, each
// registry strictly increasing, and after warm-up no Next waits for Redis.
func TestSegmentsConcurrentClients(t *testing.T) {
	const (
		clients    = 3
		goroutines = 8
		total      = 3_000_000
		warm       = 300_000 // per client, drawn before the measured run
		perG       = (total/clients - warm) / goroutines
	)
	ctx := ctxT(t)
	prefix := uniqueKey(t) + ":"
	gens := make([]*redisid.Segment, clients)
	for i := range gens {
		s := newSegments(t, shared.Client(t), redisid.WithPrefix(prefix),
			redisid.WithStepBounds(1000, 1_000_000))
		g, err := s.For("order")
		if err != nil {
			t.Fatal(err)
		}
		gens[i] = g
	}

	all := make([][]int64, 0, clients*(goroutines+1))
	for _, g := range gens {
		ids := make([]int64, warm)
		for i := range ids {
			id, err := g.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("not increasing: %d after %d", id, ids[i-1])
			}
			ids[i] = id
		}
		all = append(all, ids)
	}
	// Let the prefetch started during warm-up land before counting waits.
	for _, g := range gens {
		waitFor(t, func() bool { return g.Stats().Ready })
	}
	waitsBefore := make([]int64, clients)
	for i, g := range gens {
		waitsBefore[i] = g.Stats().Waits
	}

	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		bad atomic.Pointer[error] // the errors differ in dynamic type: not an atomic.Value
	)
	lastWarm := make([]int64, clients)
	for c := range gens {
		lastWarm[c] = all[c][warm-1]
	}
	for c, g := range gens {
		var published atomic.Int64 // the largest ID whose Next has returned
		published.Store(lastWarm[c])
		for range goroutines {
			wg.Go(func() {
				ids := make([]int64, perG)
				for i := range ids {
					before := published.Load()
					id, err := g.Next(ctx)
					if err != nil {
						bad.Store(&err)
						return
					}
					// Strictly increasing per generator: an ID is larger than
					// every ID whose Next returned before this Next began.
					if id <= before {
						err := errors.New("ID not larger than an earlier one")
						bad.Store(&err)
						return
					}
					for old := published.Load(); id > old && !published.CompareAndSwap(old, id); old = published.Load() {
					}
					ids[i] = id
				}
				mu.Lock()
				all = append(all, ids)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if err := bad.Load(); err != nil {
		t.Fatal(*err)
	}
	flat := make([]int64, 0, total)
	for _, ids := range all {
		flat = append(flat, ids...)
	}
	if len(flat) != clients*(warm+goroutines*perG) {
		t.Fatalf("got %d IDs", len(flat))
	}
	noDuplicates(t, flat)
	for i, g := range gens {
		st := g.Stats()
		t.Logf("client %d: %+v", i, st)
		if w := st.Waits - waitsBefore[i]; w != 0 {
			t.Errorf("client %d: %d Next calls waited for Redis after warm-up", i, w)
		}
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	waitForWithin(t, 10*time.Second, cond)
}

// waitForWithin polls cond for up to d.
func waitForWithin(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSegmentRedisRestart kills Redis (AOF, appendfsync always) while 3
// registries draw IDs: errors only while it is down, no duplicate after.
func TestSegmentRedisRestart(t *testing.T) {
	r := testserver.StartRedis(t, testserver.WithAOF("always"))
	const (
		clients    = 3
		goroutines = 4
		capPerG    = 100_000
	)
	ctx := ctxT(t)
	gens := make([]*redisid.Segment, clients)
	for i := range gens {
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { rdb.Close() })
		s := newSegments(t, rdb, redisid.WithStep(500), redisid.WithStepBounds(500, 2000))
		gens[i], _ = s.For("restart")
	}

	type drawErr struct {
		at    time.Time
		err   error
		drawn int64 // IDs drawn by all goroutines when it happened
	}
	var (
		mu    sync.Mutex
		all   [][]int64
		errs  []drawErr
		drawn atomic.Int64
		wg    sync.WaitGroup
		done  = make(chan struct{})
		// lastEr holds errors of several dynamic types (a dial error, a
		// context deadline): an atomic.Value would panic on the second.
		lastEr atomic.Pointer[error]
	)
	for _, g := range gens {
		for range goroutines {
			wg.Go(func() {
				ids := make([]int64, 0, capPerG)
				defer func() {
					mu.Lock()
					all = append(all, ids)
					mu.Unlock()
				}()
				for {
					select {
					case <-done:
						return
					default:
					}
					if len(ids) == capPerG {
						time.Sleep(time.Millisecond)
						continue
					}
					cctx, cancel := context.WithTimeout(ctx, time.Second)
					id, err := g.Next(cctx)
					cancel()
					if err != nil {
						mu.Lock()
						errs = append(errs, drawErr{time.Now(), err, drawn.Load()})
						mu.Unlock()
						lastEr.Store(&err)
						time.Sleep(2 * time.Millisecond)
						continue
					}
					ids = append(ids, id)
					drawn.Add(1)
				}
			})
		}
	}
	// Draws under the race detector on a loaded 2-core machine: 100 000
	// took longer than 10 s beside two CPU burners and zklock's tests.
	const drawWait = time.Minute
	waitForWithin(t, drawWait, func() bool { return drawn.Load() >= 100_000 })
	killAt := time.Now()
	r.Kill()
	time.Sleep(500 * time.Millisecond)
	if err := r.Start(); err != nil {
		close(done)
		wg.Wait()
		t.Fatal(err)
	}
	upAt := time.Now()
	after := drawn.Load()
	waitForWithin(t, drawWait, func() bool { return drawn.Load() >= after+300_000 })
	close(done)
	wg.Wait()

	// An error outside the outage (and the grace go-redis needs to notice
	// its dead pooled connections) may only be a call's own 1 s deadline
	// running out while the host starves the process (seen beside two CPU
	// burners, 3 s after the restart): never a Redis or connection error,
	// and the generator draws on after it, so it did not stay broken.
	const grace = 2 * time.Second
	final := drawn.Load()
	late := 0
	for _, e := range errs {
		if !e.at.Before(killAt) && !e.at.After(upAt.Add(grace)) {
			continue
		}
		late++
		if !errors.Is(e.err, context.DeadlineExceeded) || e.at.Before(killAt) {
			t.Errorf("error at %v, outside the outage [0s, %v]: %v", e.at.Sub(killAt), upAt.Sub(killAt), e.err)
		} else if final-e.drawn < 1000 {
			t.Errorf("deadline at %v (after the outage [0s, %v]), and only %d IDs drawn after it", e.at.Sub(killAt), upAt.Sub(killAt), final-e.drawn)
		}
	}
	var last error
	if p := lastEr.Load(); p != nil {
		last = *p
	}
	t.Logf("%d errors (%d after the outage, each a call's deadline on a starved host); last: %v; %d IDs", len(errs), late, last, final)
	var flat []int64
	for _, ids := range all {
		flat = append(flat, ids...)
	}
	noDuplicates(t, flat)
}

// TestSegmentRollbackSnapshot restarts Redis from an old snapshot: the
// generator raises the counter past what it has reserved and never repeats.
func TestSegmentRollbackSnapshot(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := ctxT(t)
	s := newSegments(t, r.Client(t), redisid.WithStep(1000), redisid.WithStepBounds(1000, 1000))
	g, _ := s.For("snap")
	var ids []int64
	draw := func(n int) {
		for range n {
			id, err := g.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	draw(2500)
	snap, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	draw(10_000)
	if err := r.RestartFromSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	draw(10_000)
	noDuplicates(t, ids)
	if st := g.Stats(); st.Rollbacks == 0 {
		t.Errorf("no rollback detected: %+v", st)
	}
}

// TestSegmentAdaptiveStep drives the step with a fake clock: it doubles while
// segments last less than the target and halves when they last over twice it.
func TestSegmentAdaptiveStep(t *testing.T) {
	ctx := ctxT(t)
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := newSegments(t, sharedClient(t), redisid.WithPrefix(uniqueKey(t)+":"),
		redisid.WithStep(1000), redisid.WithStepBounds(1000, 8000),
		redisid.WithTargetInterval(time.Minute), redisid.WithClock(clock))
	g, _ := s.For("adapt")
	draw := func(n int) {
		t.Helper()
		for range n {
			if _, err := g.Next(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Segments of 1000, 2000, 4000: each prefetch comes at once, so the step
	// doubles up to the bound.
	draw(1000 + 2000 + 4000)
	if st := g.Stats(); st.Step != 8000 {
		t.Fatalf("step after fast segments = %d, want 8000", st.Step)
	}
	draw(1) // into the 8000 segment
	advance(3 * time.Minute)
	draw(8000) // its prefetch sees 3 minutes since the last fetch
	if st := g.Stats(); st.Step != 4000 {
		t.Fatalf("step after a slow segment = %d, want 4000", st.Step)
	}
	advance(90 * time.Second) // between target and twice the target: unchanged
	draw(4000)
	if st := g.Stats(); st.Step != 4000 {
		t.Fatalf("step after a segment on target = %d, want 4000", st.Step)
	}
}

// TestSegmentNoAllocs: Next from memory does not allocate.
func TestSegmentNoAllocs(t *testing.T) {
	ctx := ctxT(t)
	s := newSegments(t, sharedClient(t), redisid.WithPrefix(uniqueKey(t)+":"),
		redisid.WithStep(1_000_000), redisid.WithStepBounds(1_000_000, 1_000_000))
	g, _ := s.For("alloc")
	for range 200_000 { // past the prefetch point (15 %)
		if _, err := g.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return g.Stats().Fetches == 2 })
	if n := testing.AllocsPerRun(10_000, func() { g.Next(ctx) }); n != 0 {
		t.Errorf("Segment.Next allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(10_000, func() { s.Next(ctx, "alloc") }); n != 0 {
		t.Errorf("Segments.Next allocates %v times per call", n)
	}
}

// TestSegmentsSharedTags: tags are independent, For returns the same
// generator, and Segments.Next draws from it.
func TestSegmentsSharedTags(t *testing.T) {
	ctx := ctxT(t)
	s := newSegments(t, sharedClient(t), redisid.WithPrefix(uniqueKey(t)+":"))
	for _, tag := range []string{"order", "user"} {
		for want := int64(1); want <= 3; want++ {
			id, err := s.Next(ctx, tag)
			if err != nil || id != want {
				t.Fatalf("Next(%q) = %d, %v; want %d", tag, id, err, want)
			}
		}
	}
	a, _ := s.For("order")
	b, _ := s.For("order")
	if a != b {
		t.Error("For returned two generators for one tag")
	}
	if id, err := a.Next(ctx); err != nil || id != 4 {
		t.Errorf("Next = %d, %v; want 4", id, err)
	}
}

func TestSegmentsBadInput(t *testing.T) {
	rdb := sharedClient(t)
	for _, tc := range []struct {
		name string
		opts []redisid.Option
		want error
	}{
		{"zero step", []redisid.Option{redisid.WithStep(0)}, redisid.ErrBadStep},
		{"negative step", []redisid.Option{redisid.WithStep(-5)}, redisid.ErrBadStep},
		{"zero lower bound", []redisid.Option{redisid.WithStepBounds(0, 10)}, redisid.ErrBadStep},
		{"inverted bounds", []redisid.Option{redisid.WithStepBounds(10, 5)}, redisid.ErrBadStep},
		{"zero target", []redisid.Option{redisid.WithTargetInterval(0)}, redisid.ErrBadOption},
		{"nil clock", []redisid.Option{redisid.WithClock(nil)}, redisid.ErrBadOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := redisid.NewSegments(rdb, tc.opts...); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
	s := newSegments(t, rdb)
	if _, err := s.For(""); !errors.Is(err, redisid.ErrEmptyTag) {
		t.Errorf("For(\"\") err = %v", err)
	}
	if _, err := s.Next(context.Background(), ""); !errors.Is(err, redisid.ErrEmptyTag) {
		t.Errorf("Next(\"\") err = %v", err)
	}
}

// TestSegmentCorruptKey: a hash or a non-number where the counter belongs is
// a clear error, never a panic or a made-up ID.
func TestSegmentCorruptKey(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	prefix := uniqueKey(t) + ":"
	rdb.HSet(ctx, prefix+"hash", "a", 1)
	rdb.Set(ctx, prefix+"text", "twelve", 0)
	s := newSegments(t, rdb, redisid.WithPrefix(prefix))
	for _, tag := range []string{"hash", "text"} {
		if _, err := s.Next(ctx, tag); !errors.Is(err, redisid.ErrCorrupt) {
			t.Errorf("Next(%q) err = %v, want ErrCorrupt", tag, err)
		}
	}
}

// TestSegmentsClose: after Close the segment in memory is served, then
// ErrClosed; Close waits for the background fetch.
func TestSegmentsClose(t *testing.T) {
	ctx := ctxT(t)
	s, err := redisid.NewSegments(sharedClient(t), redisid.WithPrefix(uniqueKey(t)+":"),
		redisid.WithStepBounds(1000, 1000))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := s.For("close")
	if _, err := g.Next(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	n := 1
	for ; n < 10_000; n++ {
		if _, err := g.Next(ctx); err != nil {
			if !errors.Is(err, redisid.ErrClosed) {
				t.Fatalf("err = %v, want ErrClosed", err)
			}
			break
		}
	}
	if n > 2000 {
		t.Errorf("served %d IDs after Close; at most two segments of 1000 were reserved", n)
	}
	if _, err := s.For("other"); !errors.Is(err, redisid.ErrClosed) {
		t.Errorf("For after Close err = %v", err)
	}
}

// TestSegmentCtx: a Next that has to wait for Redis honours ctx.
func TestSegmentCtx(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	s := newSegments(t, rdb)
	g, _ := s.For("ctx")
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := g.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Next returned after %v", d)
	}
	r.Resume()
}

// TestSegmentAppendNext: batches drawn by 8 goroutines from two registries
// on one tag, across many small segments, are each increasing, never
// overlap, and count exactly what was asked; mixed with Next. A batch does
// not allocate when dst has room; n of 0 draws nothing, a negative n is
// refused.
func TestSegmentAppendNext(t *testing.T) {
	ctx := ctxT(t)
	prefix := redisid.WithPrefix(uniqueKey(t) + ":")
	var gens []*redisid.Segment
	for range 2 {
		s := newSegments(t, sharedClient(t), prefix, redisid.WithStep(50), redisid.WithStepBounds(50, 50))
		g, err := s.For("batch")
		if err != nil {
			t.Fatal(err)
		}
		gens = append(gens, g)
	}
	const workers, rounds = 8, 300
	out := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := gens[w%2]
			var buf []int64
			for r := range rounds {
				n := 1 + (w*rounds+r)%37
				var err error
				if buf, err = g.AppendNext(ctx, buf[:0], n); err != nil {
					t.Error(err)
					return
				}
				if len(buf) != n {
					t.Errorf("AppendNext(%d) gave %d IDs", n, len(buf))
					return
				}
				for i := 1; i < n; i++ {
					if buf[i] <= buf[i-1] {
						t.Errorf("batch not increasing: %v", buf)
						return
					}
				}
				out[w] = append(out[w], buf...)
				id, err := g.Next(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				out[w] = append(out[w], id)
			}
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	total := 0
	for _, ids := range out {
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("ID %d drawn twice", id)
			}
			seen[id] = true
		}
		total += len(ids)
	}
	if st := gens[0].Stats(); st.Fetches < 10 {
		t.Errorf("only %d fetches: the batches did not cross segments", st.Fetches)
	}
	t.Logf("%d IDs in batches of 1-37 and singles, no duplicate", total)

	g := gens[0]
	buf := make([]int64, 0, 100)
	if got, err := g.AppendNext(ctx, buf, 0); err != nil || len(got) != 0 {
		t.Fatalf("AppendNext(0) = %v, %v", got, err)
	}
	if _, err := g.AppendNext(ctx, buf, -1); !errors.Is(err, redisid.ErrInvalid) {
		t.Fatalf("AppendNext(-1) = %v, want ErrInvalid", err)
	}
	big := newSegments(t, sharedClient(t), redisid.WithPrefix(uniqueKey(t)+":"),
		redisid.WithStep(1_000_000), redisid.WithStepBounds(1_000_000, 1_000_000))
	bg, _ := big.For("alloc")
	for range 2000 { // past the prefetch point (15 %)
		if _, err := bg.AppendNext(ctx, buf[:0], 100); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return bg.Stats().Fetches == 2 })
	if n := testing.AllocsPerRun(1000, func() { bg.AppendNext(ctx, buf[:0], 100) }); n != 0 {
		t.Errorf("AppendNext allocates %v times per call", n)
	}
}
