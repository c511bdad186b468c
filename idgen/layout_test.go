package idgen_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

func TestLayoutValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout idgen.Layout
		ok     bool
	}{
		{"zero", idgen.Layout{}, true},
		{"twitter", idgen.LayoutTwitter, true},
		{"worker10", idgen.LayoutWorker10, true},
		{"machine6dc8", idgen.LayoutMachine6DC8, true},
		{"sonyflake", idgen.LayoutSonyflake, true},
		{"js53", idgen.LayoutJS53, true},
		{"single worker", idgen.Layout{TimeBits: 41, SequenceBits: 22}, true},
		{"sum 62", idgen.Layout{TimeBits: 41, WorkerBits: 9, SequenceBits: 12}, false},
		{"sum 64", idgen.Layout{TimeBits: 42, WorkerBits: 10, SequenceBits: 12}, false},
		{"bits 64", idgen.Layout{Bits: 64, TimeBits: 42, WorkerBits: 10, SequenceBits: 12}, false},
		{"53 bits sum 63", idgen.Layout{Bits: 53, TimeBits: 41, WorkerBits: 10, SequenceBits: 12}, false},
		{"negative", idgen.Layout{TimeBits: 43, WorkerBits: -2, SequenceBits: 22}, false},
		{"no time", idgen.Layout{WorkerBits: 31, SequenceBits: 32}, false},
		{"datacenter wider than worker", idgen.Layout{TimeBits: 41, WorkerBits: 10, DatacenterBits: 11, SequenceBits: 12}, false},
		{"datacenter low without bits", idgen.Layout{TimeBits: 41, WorkerBits: 10, DatacenterLow: true, SequenceBits: 12}, false},
		{"unknown order", idgen.Layout{Order: 7}, false},
		{"negative tick", idgen.Layout{Tick: -time.Millisecond}, false},
		{"span over 292 years", idgen.Layout{TimeBits: 43, WorkerBits: 8, SequenceBits: 12, Tick: time.Millisecond}, false},
		{"runs out after 2262", idgen.Layout{TimeBits: 41, WorkerBits: 10, SequenceBits: 12, Epoch: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}, false},
		{"epoch before 1678", idgen.Layout{Epoch: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)}, false},
		// Issue 15, item 7: nanoseconds since an epoch before 1733 overflow
		// an int64 for today's clock; any epoch before 1970 does for a clock
		// reading before 2262.
		{"epoch 1700", idgen.Layout{Epoch: time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)}, false},
		{"epoch 1969", idgen.Layout{Epoch: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)}, false},
		{"Unix epoch", idgen.Layout{Epoch: time.Unix(0, 0)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.layout.Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
			if !tc.ok && !errors.Is(err, idgen.ErrInvalidLayout) {
				t.Fatalf("Validate = %v, want ErrInvalidLayout", err)
			}
			_, nerr := idgen.NewSnowflake(tc.layout, 0, idgen.WithClock(newClock(t0).Now))
			if tc.ok != (nerr == nil) || (!tc.ok && !errors.Is(nerr, idgen.ErrInvalidLayout)) {
				t.Fatalf("NewSnowflake = %v, want ok=%v", nerr, tc.ok)
			}
		})
	}
}

func TestNewSnowflakeErrors(t *testing.T) {
	clock := newClock(t0).Now
	for _, tc := range []struct {
		name   string
		layout idgen.Layout
		worker int64
		opts   []idgen.Option
		want   error
	}{
		{"worker too big", idgen.LayoutTwitter, 1024, nil, idgen.ErrInvalidWorker},
		{"worker negative", idgen.LayoutTwitter, -1, nil, idgen.ErrInvalidWorker},
		{"worker of single-worker layout", idgen.Layout{TimeBits: 41, SequenceBits: 22}, 1, nil, idgen.ErrInvalidWorker},
		{"epoch in the future", idgen.Layout{Epoch: t0.Add(time.Second)}, 0, nil, idgen.ErrEpochInFuture},
		{"epoch 1700 overflows", idgen.Layout{Epoch: time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)}, 0, nil, idgen.ErrInvalidLayout},
		{"time bits run out", idgen.Layout{TimeBits: 20, WorkerBits: 21, SequenceBits: 22, Epoch: t0.Add(-time.Hour)}, 0, nil, idgen.ErrTimeExhausted},
		// A mark beyond what an int64 of nanoseconds holds must not wrap
		// around to an early instant and be ignored.
		{"high-water mark after 2262", idgen.Layout{}, 0, []idgen.Option{idgen.WithHighWater(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))}, idgen.ErrTimeExhausted},
		{"tolerance negative", idgen.Layout{}, 0, []idgen.Option{idgen.WithTolerance(-1)}, idgen.ErrInvalidOption},
		{"tolerance too long", idgen.Layout{}, 0, []idgen.Option{idgen.WithTolerance(2 * time.Second)}, idgen.ErrInvalidOption},
		{"borrow too far", idgen.Layout{}, 0, []idgen.Option{idgen.WithBorrow(time.Hour)}, idgen.ErrInvalidOption},
		{"logical lead zero", idgen.Layout{}, 0, []idgen.Option{idgen.WithLogicalClock(0)}, idgen.ErrInvalidOption},
		{"logical lead too long", idgen.Layout{}, 0, []idgen.Option{idgen.WithLogicalClock(48 * time.Hour)}, idgen.ErrInvalidOption},
		{"nil clock", idgen.Layout{}, 0, []idgen.Option{idgen.WithClock(nil)}, idgen.ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]idgen.Option{idgen.WithClock(clock)}, tc.opts...)
			if tc.name == "nil clock" {
				opts = tc.opts
			}
			g, err := idgen.NewSnowflake(tc.layout, tc.worker, opts...)
			if !errors.Is(err, tc.want) || g != nil {
				t.Fatalf("NewSnowflake = %v, %v; want %v", g, err, tc.want)
			}
			// Bad input, as every coordkit package reports it; a clock that
			// ran out is not bad input.
			if invalid := tc.want != idgen.ErrTimeExhausted; errors.Is(err, idgen.ErrInvalid) != invalid {
				t.Fatalf("errors.Is(%v, ErrInvalid) = %v, want %v", err, !invalid, invalid)
			}
		})
	}
	if _, err := idgen.NewSnowflake(idgen.Layout{Epoch: t0.Add(time.Second)}, 0, idgen.WithClock(clock)); !errors.Is(err, idgen.ErrInvalidLayout) {
		t.Errorf("epoch in the future: %v, want also ErrInvalidLayout", err)
	}
}

// TestPresetTable checks the preset table of the package documentation
// against Layout.PerSecond and Layout.End.
func TestPresetTable(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range idgen.Presets() {
		var row string
		for _, line := range strings.Split(string(doc), "\n") {
			if f := strings.Fields(strings.TrimPrefix(line, "//")); len(f) > 0 && strings.EqualFold(f[0], "Layout"+l.Name) {
				row = line
			}
		}
		if row == "" {
			t.Errorf("%s: no row in doc.go", l.Name)
			continue
		}
		rate := formatThousands(int64(l.PerSecond()))
		end := l.End().Format(time.DateOnly)
		if !strings.Contains(row, " "+rate+" ") || !strings.Contains(row, end) {
			t.Errorf("%s: doc row %q, want rate %s and end %s", l.Name, row, rate, end)
		}
	}
}

func formatThousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func TestPresetCapacity(t *testing.T) {
	for _, tc := range []struct {
		l    idgen.Layout
		rate float64
		end  string
	}{
		{idgen.LayoutTwitter, 4096000, "2080-07-10T17:30:30.209Z"},
		{idgen.LayoutWorker10, 4096000, "2080-07-10T17:30:30.209Z"},
		{idgen.Layout{}, 4096000, "2080-07-10T17:30:30.209Z"},
		{idgen.LayoutMachine6DC8, 256000, "2088-12-05T07:47:35.552Z"},
		{idgen.LayoutSonyflake, 25600, "2188-11-16T03:28:58.88Z"},
		{idgen.LayoutJS53, 25600, "2112-02-09T13:44:29.44Z"},
	} {
		if got := tc.l.PerSecond(); got != tc.rate {
			t.Errorf("%s: PerSecond = %v, want %v", tc.l.Name, got, tc.rate)
		}
		if got := tc.l.End().Format(time.RFC3339Nano); got != tc.end {
			t.Errorf("%s: End = %s, want %s", tc.l.Name, got, tc.end)
		}
	}
	// The largest JS53 ID stays below 2^53.
	l := idgen.LayoutJS53
	id, err := l.Compose(idgen.Parts{Time: l.End().Add(-l.Tick), Worker: 127, Sequence: 255})
	if err != nil || id != 1<<53-1 {
		t.Errorf("largest JS53 ID = %d, %v; want 2^53-1", id, err)
	}
}

func TestDecomposeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, l := range idgen.Presets() {
		t.Run(l.Name, func(t *testing.T) {
			maxID := int64(1<<63 - 1)
			if l.Bits != 0 {
				maxID = int64(1)<<uint(l.Bits) - 1
			}
			for range 10000 {
				id := r.Int64N(maxID) + 1
				p := l.Decompose(id)
				back, err := l.Compose(p)
				if err != nil || back != id {
					t.Fatalf("Compose(Decompose(%d) = %+v) = %d, %v", id, p, back, err)
				}
				w, err := l.Worker(p.Datacenter, p.Machine)
				if err != nil || w != p.Worker {
					t.Fatalf("Worker(%d, %d) = %d, %v; want %d", p.Datacenter, p.Machine, w, err, p.Worker)
				}
			}
			// IDs from a generator decompose to its worker and clock.
			workerMax := int64(1)<<uint(l.WorkerBits) - 1
			for _, worker := range []int64{0, 1, workerMax / 3, workerMax} {
				clock := newClock(t0.Add(1234 * time.Millisecond))
				g := newSnowflake(t, l, worker, idgen.WithClock(clock.Now))
				for i := range int64(3) {
					id, err := g.Next()
					if err != nil {
						t.Fatal(err)
					}
					p := l.Decompose(id)
					wantTime := t0.Add(1234 * time.Millisecond).Truncate(l.Tick)
					if p.Worker != worker || p.Sequence != i || !p.Time.Equal(wantTime) || p != g.Decompose(id) {
						t.Fatalf("Decompose(%d) = %+v, want worker %d sequence %d time %v", id, p, worker, i, wantTime)
					}
				}
			}
		})
	}
}

func TestLayoutWorkerParts(t *testing.T) {
	// Twitter: datacenter in the high 5 bits, machine in the low 5.
	id := int64(1)<<22 | 3<<17 | 7<<12 | 9
	p := idgen.LayoutTwitter.Decompose(id)
	if p.Datacenter != 3 || p.Machine != 7 || p.Worker != 3<<5|7 || p.Sequence != 9 || p.Ticks != 1 {
		t.Errorf("Twitter Decompose = %+v", p)
	}
	if w, _ := idgen.LayoutTwitter.Worker(3, 7); w != 3<<5|7 {
		t.Errorf("Twitter Worker(3, 7) = %d", w)
	}
	if _, err := idgen.LayoutTwitter.Worker(32, 0); !errors.Is(err, idgen.ErrInvalidWorker) {
		t.Errorf("Twitter Worker(32, 0) = %v", err)
	}
	// The 41/6+8/8 layout as its Java original builds it:
	// ((ts - START) << 22) | (machine << 16) | (datacenter << 8) | sequence.
	l := idgen.LayoutMachine6DC8
	ts := int64(1700000000123)
	want := (ts-1554048000000)<<22 | 21<<16 | 200<<8 | 77
	w, err := l.Worker(200, 21)
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Compose(idgen.Parts{Time: time.UnixMilli(ts), Worker: w, Sequence: 77})
	if err != nil || got != want {
		t.Errorf("Machine6DC8 Compose = %d, %v; want %d", got, err, want)
	}
	if p := l.Decompose(want); p.Machine != 21 || p.Datacenter != 200 || p.Sequence != 77 || p.Time.UnixMilli() != ts {
		t.Errorf("Machine6DC8 Decompose = %+v", p)
	}
	// Sonyflake: time (10 ms units) << 24 | sequence << 16 | machine, as
	// sonyflake.Decompose reads it.
	sf := idgen.LayoutSonyflake
	sid := int64(123456789)<<24 | 5<<16 | 0xBEEF
	if p := sf.Decompose(sid); p.Ticks != 123456789 || p.Sequence != 5 || p.Worker != 0xBEEF ||
		!p.Time.Equal(time.Date(2014, 9, 1, 0, 0, 0, 0, time.UTC).Add(123456789*10*time.Millisecond)) {
		t.Errorf("Sonyflake Decompose = %+v", p)
	}
	g := newSnowflake(t, sf, 0xBEEF, idgen.WithClock(newClock(t0).Now))
	a, _ := g.Next()
	b, _ := g.Next()
	if a&0xFFFF != 0xBEEF || b-a != 1<<16 {
		t.Errorf("Sonyflake IDs %x, %x: want machine in the low 16 bits, sequence above", a, b)
	}
}

func TestComposeErrors(t *testing.T) {
	l := idgen.LayoutTwitter
	for _, p := range []idgen.Parts{
		{Time: t0, Worker: 1024},
		{Time: t0, Sequence: 4096},
		{Time: t0, Sequence: -1},
		{Time: idgen.TwitterEpoch.Add(-time.Millisecond)},
		{Time: l.End()},
	} {
		if _, err := l.Compose(p); err == nil {
			t.Errorf("Compose(%+v) = nil error", p)
		}
	}
	if p := (idgen.Layout{TimeBits: 1}).Decompose(5); p != (idgen.Parts{}) {
		t.Errorf("Decompose on an invalid layout = %+v, want zero", p)
	}
}
