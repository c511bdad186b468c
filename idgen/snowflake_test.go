package idgen_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

// collect takes n IDs from g in each of g goroutines, checks that each
// goroutine's IDs strictly increase, and returns them all.
func collect(t *testing.T, g *idgen.Snowflake, goroutines, n int, batch int) []int64 {
	t.Helper()
	out := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			ids := make([]int64, n)
			if batch > 0 {
				for j := 0; j < n; j += batch {
					if _, err := g.NextN(ids[j:min(j+batch, n)]); err != nil {
						t.Error(err)
						return
					}
				}
			} else {
				for j := range ids {
					id, err := g.Next()
					if err != nil {
						t.Error(err)
						return
					}
					ids[j] = id
				}
			}
			for j := 1; j < n; j++ {
				if ids[j] <= ids[j-1] {
					t.Errorf("goroutine %d: ID %d = %d after %d", i, j, ids[j], ids[j-1])
					return
				}
			}
			out[i] = ids
		})
	}
	wg.Wait()
	return slices.Concat(out...)
}

func checkUnique(t *testing.T, l idgen.Layout, worker int64, ids []int64) {
	t.Helper()
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Fatalf("duplicate ID %d", ids[i])
		}
	}
	for _, id := range ids {
		if p := l.Decompose(id); p.Worker != worker {
			t.Fatalf("Decompose(%d).Worker = %d, want %d", id, p.Worker, worker)
		}
	}
}

// TestConcurrentUnique takes 2,000,000 IDs from 8 goroutines on the real
// clock in Twitter's layout, at its sequence ceiling; then fewer in a 22-bit
// sequence whose ceiling is out of reach (more CAS contention per tick) and,
// with NextN, in Sonyflake's layout (time|sequence|worker).
func TestConcurrentUnique(t *testing.T) {
	const goroutines, perGoroutine = 8, 250_000
	for _, tc := range []struct {
		layout idgen.Layout
		worker int64
		batch  int
	}{
		{idgen.LayoutTwitter, 677, 0},
		{idgen.Layout{Name: "seq22", TimeBits: 41, SequenceBits: 22}, 0, 0},
		{idgen.LayoutSonyflake, 0xBEEF, 100},
	} {
		t.Run(tc.layout.Name, func(t *testing.T) {
			if tc.batch > 0 && testing.Short() {
				t.Skip("batch form: -short")
			}
			g := newSnowflake(t, tc.layout, tc.worker)
			n := perGoroutine // the real thing: 2,000,000 IDs
			switch {
			case tc.batch > 0:
				n = 2_000 // Sonyflake: 25,600 IDs/s, so about 0.6 s
			case tc.layout.Name == "seq22":
				n = 50_000 // contention rather than volume
			}
			ids := collect(t, g, goroutines, n, tc.batch)
			if len(ids) != goroutines*n {
				t.Fatalf("got %d IDs, want %d", len(ids), goroutines*n)
			}
			checkUnique(t, tc.layout, tc.worker, ids)
		})
	}
}

func idAt(t *testing.T, l idgen.Layout, at time.Time, worker, seq int64) int64 {
	t.Helper()
	id, err := l.Compose(idgen.Parts{Time: at, Worker: worker, Sequence: seq})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func wantBackwards(t *testing.T, err error, behind, limit time.Duration) {
	t.Helper()
	var cbe *idgen.ClockBackwardsError
	if !errors.Is(err, idgen.ErrClockBackwards) || !errors.As(err, &cbe) {
		t.Fatalf("err = %v, want *ClockBackwardsError", err)
	}
	if cbe.Behind != behind || cbe.Limit != limit {
		t.Fatalf("ClockBackwardsError{Behind: %v, Limit: %v}, want %v, %v", cbe.Behind, cbe.Limit, behind, limit)
	}
}

func TestClockStepBack(t *testing.T) {
	l := idgen.LayoutTwitter
	const worker = 5
	for _, tc := range []struct {
		name string
		step time.Duration
		ok   bool
	}{
		{"1ms", time.Millisecond, true},
		{"tolerance", idgen.DefaultTolerance, true},
		{"tolerance+1ms", idgen.DefaultTolerance + time.Millisecond, false},
		{"1s", time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock(t0)
			g := newSnowflake(t, l, worker, idgen.WithClock(clock.Now))
			is := &issuer{t: t, g: g}
			for seq := range int64(3) {
				if id := is.next(); id != idAt(t, l, t0, worker, seq) {
					t.Fatalf("ID %d = %d, want sequence %d at t0", seq, id, seq)
				}
			}
			clock.Set(t0.Add(-tc.step))
			if !tc.ok {
				_, err := g.Next()
				wantBackwards(t, err, tc.step, idgen.DefaultTolerance)
				buf := make([]int64, 4)
				n, err := g.NextN(buf)
				if n != 0 {
					t.Fatalf("NextN filled %d during the step", n)
				}
				wantBackwards(t, err, tc.step, idgen.DefaultTolerance)
				// Once the clock is back, IDs resume above the last one.
				clock.Set(t0.Add(time.Millisecond))
				if id := is.next(); id != idAt(t, l, t0.Add(time.Millisecond), worker, 0) {
					t.Fatalf("after the step: %d", id)
				}
				return
			}
			// Within the tolerance: the last tick's sequence goes on...
			if id := is.next(); id != idAt(t, l, t0, worker, 3) {
				t.Fatalf("after the step: %+v, want sequence 3 at t0", l.Decompose(id))
			}
			rest := make([]int64, 4096-4)
			if n, err := g.NextN(rest); err != nil || n != len(rest) {
				t.Fatalf("NextN = %d, %v", n, err)
			}
			if rest[len(rest)-1] != idAt(t, l, t0, worker, 4095) {
				t.Fatalf("last of tick: %+v", l.Decompose(rest[len(rest)-1]))
			}
			is.last = rest[len(rest)-1]
			// ...then Next waits until the clock reaches the next tick.
			clock.SetStep(100 * time.Microsecond)
			if id := is.next(); id != idAt(t, l, t0.Add(time.Millisecond), worker, 0) {
				t.Fatalf("after the wait: %+v, want sequence 0 at t0+1ms", l.Decompose(id))
			}
		})
	}
}

func TestClockFrozenAcrossExhaustion(t *testing.T) {
	l := idgen.LayoutTwitter
	clock := newClock(t0)
	g := newSnowflake(t, l, 1, idgen.WithClock(clock.Now))
	ids := make([]int64, 4096)
	if n, err := g.NextN(ids); err != nil || n != 4096 {
		t.Fatalf("NextN = %d, %v", n, err)
	}
	for i, id := range ids {
		if id != idAt(t, l, t0, 1, int64(i)) {
			t.Fatalf("ids[%d] = %+v", i, l.Decompose(id))
		}
	}
	next := await(g.Next)
	select {
	case r := <-next:
		t.Fatalf("Next returned %+v, %v on a frozen clock with the tick used up", l.Decompose(r.v), r.err)
	case <-time.After(20 * time.Millisecond):
	}
	clock.Advance(time.Millisecond)
	r := <-next
	if r.err != nil || r.v != idAt(t, l, t0.Add(time.Millisecond), 1, 0) {
		t.Fatalf("Next = %+v, %v; want sequence 0 at t0+1ms", l.Decompose(r.v), r.err)
	}
}

func TestClockJumpForward(t *testing.T) {
	l := idgen.LayoutTwitter
	clock := newClock(t0)
	g := newSnowflake(t, l, 2, idgen.WithClock(clock.Now))
	is := &issuer{t: t, g: g}
	is.next()
	is.next()
	clock.Set(t0.Add(time.Hour))
	if id := is.next(); id != idAt(t, l, t0.Add(time.Hour), 2, 0) {
		t.Fatalf("after the jump: %+v", l.Decompose(id))
	}
	// Coming back from the jump is a step back like any other.
	clock.Set(t0.Add(time.Hour - 2*time.Millisecond))
	if id := is.next(); id != idAt(t, l, t0.Add(time.Hour), 2, 1) {
		t.Fatalf("2 ms back: %+v", l.Decompose(id))
	}
	clock.Set(t0.Add(time.Millisecond))
	_, err := g.Next()
	wantBackwards(t, err, time.Hour-time.Millisecond, idgen.DefaultTolerance)
}

func TestTimeExhausted(t *testing.T) {
	// 20 time bits of 1 ms last 17.5 minutes.
	l := idgen.Layout{TimeBits: 20, WorkerBits: 21, SequenceBits: 22, Epoch: t0}
	clock := newClock(t0.Add(time.Minute))
	g := newSnowflake(t, l, 0, idgen.WithClock(clock.Now))
	if _, err := g.Next(); err != nil {
		t.Fatal(err)
	}
	clock.Set(l.End().Add(-time.Millisecond))
	if _, err := g.Next(); err != nil {
		t.Fatalf("last tick: %v", err)
	}
	clock.Set(l.End())
	if _, err := g.Next(); !errors.Is(err, idgen.ErrTimeExhausted) {
		t.Fatalf("after End: %v, want ErrTimeExhausted", err)
	}
}

func TestWithTolerance(t *testing.T) {
	l := idgen.LayoutTwitter
	clock := newClock(t0)
	g := newSnowflake(t, l, 0, idgen.WithClock(clock.Now), idgen.WithTolerance(0))
	is := &issuer{t: t, g: g}
	is.next()
	// Same tick: fine even with no tolerance.
	clock.Set(t0.Add(999 * time.Microsecond))
	is.next()
	clock.Set(t0.Add(-time.Microsecond))
	_, err := g.Next()
	wantBackwards(t, err, time.Microsecond, 0)
}

func TestBorrow(t *testing.T) {
	l := idgen.Layout{Name: "seq8", TimeBits: 41, WorkerBits: 14, SequenceBits: 8}
	const ahead = 10 * time.Millisecond

	t.Run("burst", func(t *testing.T) {
		clock := newClock(t0)
		g := newSnowflake(t, l, 3, idgen.WithClock(clock.Now), idgen.WithBorrow(ahead))
		// A frozen clock: the tick at t0 plus 10 borrowed ones, without waiting.
		ids := make([]int64, 256*11)
		if n, err := g.NextN(ids); err != nil || n != len(ids) {
			t.Fatalf("NextN = %d, %v", n, err)
		}
		if last := l.Decompose(ids[len(ids)-1]); !last.Time.Equal(t0.Add(ahead)) || last.Sequence != 255 {
			t.Fatalf("last borrowed ID: %+v", last)
		}
		checkUnique(t, l, 3, slices.Clone(ids))
		next := await(g.Next)
		select {
		case r := <-next:
			t.Fatalf("Next borrowed beyond the bound: %+v, %v", l.Decompose(r.v), r.err)
		case <-time.After(20 * time.Millisecond):
		}
		clock.Advance(time.Millisecond)
		if r := <-next; r.err != nil || r.v != idAt(t, l, t0.Add(ahead+time.Millisecond), 3, 0) {
			t.Fatalf("Next = %+v, %v", l.Decompose(r.v), r.err)
		}
	})

	t.Run("step back", func(t *testing.T) {
		clock := newClock(t0)
		g := newSnowflake(t, l, 3, idgen.WithClock(clock.Now), idgen.WithBorrow(ahead))
		is := &issuer{t: t, g: g}
		is.next()
		clock.Set(t0.Add(-8 * time.Millisecond)) // beyond the tolerance, within the borrow
		for range 600 {                          // more than two ticks' worth: borrows ticks
			is.next()
		}
		if p := l.Decompose(is.last); !p.Time.Equal(t0.Add(2*time.Millisecond)) || p.Sequence != 600-512 {
			t.Fatalf("last ID: %+v", p)
		}
		clock.Set(t0.Add(-time.Second))
		_, err := g.Next()
		wantBackwards(t, err, time.Second+2*time.Millisecond, ahead)
	})
}

func TestLogicalClock(t *testing.T) {
	l := idgen.LayoutTwitter
	clock := newClock(t0)
	g := newSnowflake(t, l, 4, idgen.WithClock(clock.Now), idgen.WithElapsed(clock.Elapsed), idgen.WithLogicalClock(2*time.Second))
	is := &issuer{t: t, g: g}
	is.next()
	// The wall clock steps back 1 s; the monotonic clock does not.
	clock.Set(t0.Add(-time.Second))
	if id := is.next(); id != idAt(t, l, t0, 4, 1) {
		t.Fatalf("after the step: %+v", l.Decompose(id))
	}
	clock.Advance(10 * time.Millisecond)
	if id := is.next(); id != idAt(t, l, t0.Add(10*time.Millisecond), 4, 0) {
		t.Fatalf("10 ms later: %+v, want the logical time t0+10ms", l.Decompose(id))
	}
	// A wall clock ahead of the logical clock wins.
	clock.Set(t0.Add(time.Minute))
	if id := is.next(); id != idAt(t, l, t0.Add(time.Minute), 4, 0) {
		t.Fatalf("wall ahead: %+v", l.Decompose(id))
	}
	// A step back the lead bound does not cover is reported. The logical
	// clock followed the wall clock to t0+1m, so it leads by 1m3s (issue 15,
	// item 7: it used to fall back to t0+10ms and report 3.01 s, below IDs
	// already issued at t0+1m).
	clock.Set(t0.Add(-3 * time.Second))
	_, err := g.Next()
	wantBackwards(t, err, time.Minute+3*time.Second, 2*time.Second)

	t.Run("lead bound", func(t *testing.T) {
		clock := newClock(t0)
		g := newSnowflake(t, l, 4, idgen.WithClock(clock.Now), idgen.WithElapsed(clock.Elapsed), idgen.WithLogicalClock(2*time.Second))
		is := &issuer{t: t, g: g}
		is.next()
		clock.Set(t0.Add(-3 * time.Second))
		clock.Advance(5 * time.Millisecond)
		_, err := g.Next()
		wantBackwards(t, err, 3*time.Second, 2*time.Second)
	})

	t.Run("Go monotonic clock", func(t *testing.T) {
		// Readings that carry Go's monotonic clock: the default elapsed time.
		base := time.Now()
		var mu sync.Mutex
		off := time.Duration(0)
		now := func() time.Time { mu.Lock(); defer mu.Unlock(); return base.Add(off) }
		g := newSnowflake(t, idgen.Layout{}, 0, idgen.WithClock(now), idgen.WithLogicalClock(time.Second))
		is := &issuer{t: t, g: g}
		is.next()
		mu.Lock()
		off = 5 * time.Millisecond
		mu.Unlock()
		if p := g.Decompose(is.next()); !p.Time.Equal(base.Add(5 * time.Millisecond).Truncate(time.Millisecond).UTC()) {
			t.Fatalf("time %v, want %v", p.Time, base.Add(5*time.Millisecond))
		}
	})
}

// TestLogicalClockStepForwardThenBack is issue 15, item 7: the logical clock
// follows a wall clock that steps forward, and must then absorb the step back
// of the same size (a lead within maxLead), not report it.
func TestLogicalClockStepForwardThenBack(t *testing.T) {
	l := idgen.LayoutTwitter
	clock := newClock(t0)
	g := newSnowflake(t, l, 4, idgen.WithClock(clock.Now), idgen.WithElapsed(clock.Elapsed), idgen.WithLogicalClock(time.Minute))
	is := &issuer{t: t, g: g}
	is.next()
	clock.Set(t0.Add(10 * time.Second)) // a step forward: followed at once
	if id := is.next(); id != idAt(t, l, t0.Add(10*time.Second), 4, 0) {
		t.Fatalf("after the step forward: %+v", l.Decompose(id))
	}
	clock.Set(t0) // and back by as much: a lead of 10 s, within a minute
	if id := is.next(); id != idAt(t, l, t0.Add(10*time.Second), 4, 1) {
		t.Fatalf("after the step back: %+v, want the logical time t0+10s", l.Decompose(id))
	}
	clock.Advance(5 * time.Millisecond) // the logical clock runs on from t0+10s
	if id := is.next(); id != idAt(t, l, t0.Add(10*time.Second+5*time.Millisecond), 4, 0) {
		t.Fatalf("5 ms later: %+v", l.Decompose(id))
	}
	// A wall clock that then catches up is followed again, with no lead.
	clock.Set(t0.Add(11 * time.Second))
	if id := is.next(); id != idAt(t, l, t0.Add(11*time.Second), 4, 0) {
		t.Fatalf("wall clock ahead again: %+v", l.Decompose(id))
	}
	// A lead beyond maxLead is reported, measured from the logical clock.
	clock.Set(t0.Add(11*time.Second - 2*time.Minute))
	_, err := g.Next()
	wantBackwards(t, err, 2*time.Minute, time.Minute)
}

func TestHighWater(t *testing.T) {
	l := idgen.LayoutTwitter
	ctx := context.Background()
	store := &memStore{}
	clock := newClock(t0.Add(100 * time.Millisecond))
	g1, err := idgen.OpenSnowflake(ctx, store, l, 9, idgen.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	is := &issuer{t: t, g: g1}
	for range 10 {
		is.next()
	}
	if err := g1.Checkpoint(ctx, store); err != nil {
		t.Fatal(err)
	}
	mark := t0.Add(101 * time.Millisecond)
	if !store.mark.Equal(mark) || !g1.HighWater().Equal(mark) {
		t.Fatalf("mark %v, HighWater %v; want %v", store.mark, g1.HighWater(), mark)
	}

	// A restart on a clock set back 100 ms is detected (behind the last tick
	// issued, which starts 1 ms before the mark).
	_, err = idgen.OpenSnowflake(ctx, store, l, 9, idgen.WithClock(newClock(t0).Now))
	wantBackwards(t, err, 100*time.Millisecond, idgen.DefaultTolerance)

	// Within the tolerance: it waits for the mark, then issues above it.
	c2 := newClock(t0.Add(98 * time.Millisecond))
	c2.SetStep(100 * time.Microsecond)
	g2, err := idgen.OpenSnowflake(ctx, store, l, 9, idgen.WithClock(c2.Now))
	if err != nil {
		t.Fatal(err)
	}
	is2 := &issuer{t: t, g: g2, last: is.last}
	if id := is2.next(); id != idAt(t, l, mark, 9, 0) {
		t.Fatalf("first ID after restart: %+v, want sequence 0 at the mark", l.Decompose(id))
	}

	// Later: the mark is in the past and changes nothing.
	g3, err := idgen.OpenSnowflake(ctx, store, l, 9, idgen.WithClock(newClock(t0.Add(time.Second)).Now))
	if err != nil {
		t.Fatal(err)
	}
	if id, err := g3.Next(); err != nil || id != idAt(t, l, t0.Add(time.Second), 9, 0) {
		t.Fatalf("Next = %+v, %v", l.Decompose(id), err)
	}

	// No mark stored: a fresh worker.
	g4, err := idgen.OpenSnowflake(ctx, &memStore{}, l, 9, idgen.WithClock(newClock(t0).Now))
	if err != nil {
		t.Fatal(err)
	}
	if id, err := g4.Next(); err != nil || id != idAt(t, l, t0, 9, 0) {
		t.Fatalf("Next = %+v, %v", l.Decompose(id), err)
	}
}

// TestBorrowRestartFromCheckpoint is issue 15, item 7: a generator that
// borrowed ahead of its clock after its last checkpoint, then crashed, must
// not have its IDs reissued by a restart from that checkpoint, with no clock
// step at all.
func TestBorrowRestartFromCheckpoint(t *testing.T) {
	l := idgen.Layout{Name: "seq2", TimeBits: 41, WorkerBits: 20, SequenceBits: 2}
	const ahead = 10 * time.Second
	ctx := context.Background()
	store := &memStore{}
	clock := newClock(t0)
	g1, err := idgen.OpenSnowflake(ctx, store, l, 5, idgen.WithClock(clock.Now), idgen.WithBorrow(ahead))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g1.Next(); err != nil {
		t.Fatal(err)
	}
	if err := g1.Checkpoint(ctx, store); err != nil { // the periodic checkpoint
		t.Fatal(err)
	}
	// A burst: 3 s of ticks (4 IDs each) borrowed within one millisecond.
	clock.SetStep(time.Millisecond / 4000)
	burst := make([]int64, 3000*4)
	if n, err := g1.NextN(burst); err != nil || n != len(burst) {
		t.Fatalf("NextN = %d, %v", n, err)
	}
	if last := l.Decompose(burst[len(burst)-1]); last.Time.Before(t0.Add(2 * time.Second)) {
		t.Fatalf("the burst did not borrow: last ID at %v", last.Time)
	}
	issued := make(map[int64]bool, len(burst))
	for _, id := range burst {
		issued[id] = true
	}
	// g1 crashes; the worker restarts 1 s later from the stored mark.
	g2, err := idgen.OpenSnowflake(ctx, store, l, 5, idgen.WithClock(newClock(t0.Add(time.Second)).Now), idgen.WithBorrow(ahead))
	if err != nil {
		t.Fatal(err)
	}
	again := 0
	for range 100 {
		id, err := g2.Next()
		if err != nil {
			t.Fatal(err)
		}
		if issued[id] {
			again++
		}
	}
	if again > 0 {
		t.Fatalf("%d of 100 IDs after the restart were issued before the crash (stored mark %v)", again, store.mark)
	}
}

// TestBorrowWaitsForReservation: a generator built WithHighWater borrows
// only ticks below the last mark it stored; then Next waits until the clock
// or a Checkpoint moves that mark. One built without it borrows freely.
func TestBorrowWaitsForReservation(t *testing.T) {
	l := idgen.Layout{Name: "seq2", TimeBits: 41, WorkerBits: 20, SequenceBits: 2}
	const ahead = 100 * time.Millisecond
	ctx := context.Background()
	store := &memStore{}
	clock := newClock(t0) // frozen
	g, err := idgen.OpenSnowflake(ctx, store, l, 5, idgen.WithClock(clock.Now), idgen.WithBorrow(ahead))
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(ahead); !store.mark.Equal(want) {
		t.Fatalf("OpenSnowflake stored %v, want the reservation %v", store.mark, want)
	}
	// The tick at t0 and 99 borrowed ones lie below the reservation.
	ids := make([]int64, 100*4)
	if n, err := g.NextN(ids); err != nil || n != len(ids) {
		t.Fatalf("NextN = %d, %v", n, err)
	}
	if p := l.Decompose(ids[len(ids)-1]); !p.Time.Equal(t0.Add(ahead-time.Millisecond)) || p.Sequence != 3 {
		t.Fatalf("last ID below the reservation: %+v", p)
	}
	next := await(g.Next)
	select {
	case r := <-next:
		t.Fatalf("Next borrowed at or above the stored mark %v: %+v, %v", store.mark, l.Decompose(r.v), r.err)
	case <-time.After(50 * time.Millisecond):
	}
	// The clock moves on 10 ms; a checkpoint reserves 10 ms more.
	clock.Advance(10 * time.Millisecond)
	if err := g.Checkpoint(ctx, store); err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(ahead + 10*time.Millisecond); !store.mark.Equal(want) {
		t.Fatalf("Checkpoint stored %v, want %v", store.mark, want)
	}
	if r := <-next; r.err != nil || r.v != idAt(t, l, t0.Add(ahead), 5, 0) {
		t.Fatalf("Next after the checkpoint = %+v, %v", l.Decompose(r.v), r.err)
	}

	// Without WithHighWater nothing is stored, and borrowing is not limited.
	free := newSnowflake(t, l, 5, idgen.WithClock(newClock(t0).Now), idgen.WithBorrow(ahead))
	if n, err := free.NextN(make([]int64, 101*4)); err != nil || n != 101*4 {
		t.Fatalf("NextN without a store = %d, %v", n, err)
	}
}

type failStore struct{ memStore }

var errStore = errors.New("store down")

func (*failStore) Load(context.Context) (time.Time, error) { return time.Time{}, errStore }

func TestOpenSnowflakeStoreError(t *testing.T) {
	if _, err := idgen.OpenSnowflake(context.Background(), &failStore{}, idgen.Layout{}, 0); !errors.Is(err, errStore) {
		t.Fatalf("err = %v", err)
	}
}

func TestLease(t *testing.T) {
	l := idgen.LayoutTwitter
	clock := newClock(t0)
	lost := make(chan struct{})
	g := newSnowflake(t, l, 1, idgen.WithClock(clock.Now), idgen.WithLease(lost))
	ids := make([]int64, 4096)
	if n, err := g.NextN(ids); err != nil || n != 4096 {
		t.Fatalf("NextN = %d, %v", n, err)
	}
	// A caller waiting for the next tick learns of the loss too.
	next := await(g.Next)
	time.Sleep(5 * time.Millisecond)
	close(lost)
	if r := <-next; !errors.Is(r.err, idgen.ErrLeaseLost) {
		t.Fatalf("waiting Next = %v, %v; want ErrLeaseLost", r.v, r.err)
	}
	clock.Advance(time.Second)
	if _, err := g.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("Next = %v, want ErrLeaseLost", err)
	}
	if n, err := g.NextN(ids); n != 0 || !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("NextN = %d, %v; want ErrLeaseLost", n, err)
	}
}

// TestLeaseDeadline: once the held function of WithLeaseDeadline reports
// false (the lease's deadline passed, say while the process was stopped),
// Next, NextN and a caller waiting for the next tick return ErrLeaseLost,
// though the lost channel is still open; held is asked after the clock is
// read, so no ID carries a time read after the deadline.
func TestLeaseDeadline(t *testing.T) {
	l := idgen.LayoutTwitter
	clock := newClock(t0)
	var held atomic.Bool
	held.Store(true)
	var readAt, askedAt atomic.Int64 // order of the last clock reading and held call
	var seq atomic.Int64
	now := func() time.Time { readAt.Store(seq.Add(1)); return clock.Now() }
	g := newSnowflake(t, l, 1, idgen.WithClock(now), idgen.WithLease(make(chan struct{})),
		idgen.WithLeaseDeadline(func() bool { askedAt.Store(seq.Add(1)); return held.Load() }))
	ids := make([]int64, 4096)
	if n, err := g.NextN(ids); err != nil || n != 4096 {
		t.Fatalf("NextN = %d, %v", n, err)
	}
	if askedAt.Load() < readAt.Load() {
		t.Fatal("held was asked before the clock reading the IDs carry")
	}
	next := await(g.Next) // waits for the next tick
	time.Sleep(5 * time.Millisecond)
	held.Store(false)
	clock.Advance(time.Millisecond)
	if r := <-next; !errors.Is(r.err, idgen.ErrLeaseLost) {
		t.Fatalf("waiting Next = %v, %v; want ErrLeaseLost", r.v, r.err)
	}
	if _, err := g.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("Next = %v, want ErrLeaseLost", err)
	}
	if n, err := g.NextN(ids); n != 0 || !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("NextN = %d, %v; want ErrLeaseLost", n, err)
	}
}

// TestRetire: after Retire no ID is issued above the mark it returns, even by
// goroutines racing it, and Next returns the cause.
func TestRetire(t *testing.T) {
	l := idgen.Layout{Name: "seq2", TimeBits: 41, WorkerBits: 20, SequenceBits: 2}
	clock := newClock(t0)
	clock.SetStep(time.Millisecond) // every reading a tick later
	g := newSnowflake(t, l, 1, idgen.WithClock(clock.Now), idgen.WithBorrow(time.Second))
	cause := errors.New("worker handed over")
	var wg sync.WaitGroup
	ids := make([][]int64, 4)
	errs := make([]error, 4)
	for i := range ids {
		wg.Go(func() {
			for {
				id, err := g.Next()
				if err != nil {
					errs[i] = err
					return
				}
				ids[i] = append(ids[i], id)
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	mark := g.Retire(cause)
	wg.Wait()
	for i := range ids {
		if !errors.Is(errs[i], cause) {
			t.Errorf("goroutine %d ended with %v, want the cause", i, errs[i])
		}
		for _, id := range ids[i] {
			if p := l.Decompose(id); !p.Time.Before(mark) {
				t.Fatalf("ID at %v issued, not before the mark %v", p.Time, mark)
			}
		}
	}
	if !g.HighWater().Equal(mark) || !g.Retire(nil).Equal(mark) {
		t.Fatalf("HighWater %v after Retire, want %v", g.HighWater(), mark)
	}
	if _, err := g.Next(); !errors.Is(err, cause) {
		t.Fatalf("Next after a second Retire: %v, want the first cause", err)
	}
	// A retired generator's checkpoint is its mark, with no reservation.
	store := &memStore{}
	if err := g.Checkpoint(context.Background(), store); err != nil || !store.mark.Equal(mark) {
		t.Fatalf("Checkpoint stored %v, %v; want %v", store.mark, err, mark)
	}

	t.Run("waiting caller", func(t *testing.T) {
		g := newSnowflake(t, l, 1, idgen.WithClock(newClock(t0).Now)) // frozen
		if n, err := g.NextN(make([]int64, 4)); err != nil || n != 4 {
			t.Fatalf("NextN = %d, %v", n, err)
		}
		next := await(g.Next) // waits for the next tick
		time.Sleep(5 * time.Millisecond)
		g.Retire(nil)
		if r := <-next; !errors.Is(r.err, idgen.ErrRetired) {
			t.Fatalf("waiting Next = %v, %v; want ErrRetired", r.v, r.err)
		}
	})

	t.Run("lease lost", func(t *testing.T) {
		lost := make(chan struct{})
		g := newSnowflake(t, l, 1, idgen.WithClock(newClock(t0).Now), idgen.WithLease(lost))
		g.Retire(nil)
		close(lost)
		if _, err := g.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
			t.Fatalf("Next = %v, want ErrLeaseLost", err)
		}
	})
}

func TestNextNMatchesNext(t *testing.T) {
	l := idgen.Layout{Name: "seq4", TimeBits: 41, WorkerBits: 18, SequenceBits: 4}
	c1, c2 := newClock(t0), newClock(t0)
	c1.SetStep(50 * time.Microsecond)
	c2.SetStep(50 * time.Microsecond)
	a := newSnowflake(t, l, 7, idgen.WithClock(c1.Now))
	b := newSnowflake(t, l, 7, idgen.WithClock(c2.Now))
	batch := make([]int64, 100)
	if n, err := a.NextN(batch); err != nil || n != 100 {
		t.Fatalf("NextN = %d, %v", n, err)
	}
	for i := 1; i < len(batch); i++ {
		if batch[i] <= batch[i-1] {
			t.Fatalf("batch[%d] = %d after %d", i, batch[i], batch[i-1])
		}
	}
	if n, err := a.NextN(nil); n != 0 || err != nil {
		t.Fatalf("NextN(nil) = %d, %v", n, err)
	}
	// The batch takes whole runs of a tick per CAS; one by one reads the clock
	// per ID. Both give 16 IDs per tick, in order.
	for i := range 16 {
		id, err := b.Next()
		if err != nil || l.Decompose(id).Sequence != int64(i) {
			t.Fatalf("Next %d: %+v, %v", i, l.Decompose(id), err)
		}
	}
	if p := l.Decompose(batch[15]); p.Sequence != 15 || !p.Time.Equal(t0) {
		t.Fatalf("batch[15] = %+v", p)
	}
	if p := l.Decompose(batch[16]); p.Sequence != 0 || !p.Time.After(t0) {
		t.Fatalf("batch[16] = %+v", p)
	}
}
