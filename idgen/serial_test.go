package idgen_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

func TestSerial(t *testing.T) {
	clock := newClock(time.Date(2024, 3, 9, 14, 5, 6, 789_000_000, time.UTC))
	s, err := idgen.NewSerial(idgen.SerialFormat{}, 42, idgen.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"20240309140506789004200000000000", "20240309140506789004200000000001"} {
		got, err := s.Next()
		if err != nil || got != want {
			t.Fatalf("serial %d = %s, %v; want %s", i, got, err, want)
		}
	}
	p, err := s.Format().Parse("20240309140506789004200000000001")
	if err != nil || p.Worker != 42 || p.Sequence != 1 || !p.Time.Equal(time.Date(2024, 3, 9, 14, 5, 6, 789_000_000, time.UTC)) {
		t.Fatalf("Parse = %+v, %v", p, err)
	}
	clock.Advance(time.Millisecond)
	b, err := s.AppendNext([]byte("SN-"))
	if err != nil || string(b) != "SN-20240309140506790004200000000000" {
		t.Fatalf("AppendNext = %s, %v", b, err)
	}
	if !s.HighWater().Equal(time.Date(2024, 3, 9, 14, 5, 6, 791_000_000, time.UTC)) {
		t.Fatalf("HighWater = %v", s.HighWater())
	}
}

func TestSerialFormats(t *testing.T) {
	shanghai := time.FixedZone("CST", 8*3600)
	at := time.Date(2024, 12, 31, 23, 59, 59, 999_000_000, time.UTC)
	for _, tc := range []struct {
		f    idgen.SerialFormat
		p    idgen.SerialParts
		want string
	}{
		{idgen.SerialFormat{}, idgen.SerialParts{Time: at, Worker: 9999, Sequence: 99999999999}, "20241231235959999999999999999999"},
		{idgen.SerialFormat{Width: 24, WorkerDigits: 2}, idgen.SerialParts{Time: at, Worker: 7, Sequence: 12345}, "202412312359599990712345"},
		{idgen.SerialFormat{Width: 20, WorkerDigits: 1, Location: shanghai}, idgen.SerialParts{Time: at, Worker: 3, Sequence: 4}, "20250101075959999304"},
	} {
		got, err := tc.f.Format(tc.p)
		if err != nil || got != tc.want {
			t.Errorf("Format(%+v) = %s, %v; want %s", tc.p, got, err, tc.want)
			continue
		}
		p, err := tc.f.Parse(got)
		if err != nil || !p.Time.Equal(tc.p.Time) || p.Worker != tc.p.Worker || p.Sequence != tc.p.Sequence {
			t.Errorf("Parse(%s) = %+v, %v", got, p, err)
		}
	}
	f := idgen.SerialFormat{}
	for _, bad := range []string{
		"",
		"2024123123595999999999999999999",   // 31
		"2024123123595999999999999999999x",  // non-digit
		"20241331235959999999999999999999",  // month 13
		"20240230235959999999999999999999",  // 30 February
		"20241231245959999999999999999999",  // hour 24
		"20241231236059999999999999999999",  // minute 60
		"202412312359599999999999999999999", // 33
	} {
		if _, err := f.Parse(bad); !errors.Is(err, idgen.ErrInvalidID) {
			t.Errorf("Parse(%q) = %v, want ErrInvalidID", bad, err)
		}
	}
	for _, bad := range []idgen.SerialFormat{{Width: 21}, {Width: 40}, {WorkerDigits: 19}, {WorkerDigits: -1}} {
		if err := bad.Validate(); !errors.Is(err, idgen.ErrInvalidLayout) {
			t.Errorf("Validate(%+v) = %v", bad, err)
		}
	}
	if _, err := f.Format(idgen.SerialParts{Time: at, Worker: 10000}); !errors.Is(err, idgen.ErrInvalidID) {
		t.Errorf("Format(worker 10000) = %v", err)
	}
	if _, err := f.Format(idgen.SerialParts{Time: at, Sequence: -1}); !errors.Is(err, idgen.ErrInvalidID) {
		t.Errorf("Format(sequence -1) = %v", err)
	}
}

func TestSerialGenerator(t *testing.T) {
	if _, err := idgen.NewSerial(idgen.SerialFormat{}, 10000); !errors.Is(err, idgen.ErrInvalidWorker) {
		t.Errorf("worker 10000: %v", err)
	}
	// A zone with daylight saving time repeats local times: refused.
	if loc, err := time.LoadLocation("Europe/Berlin"); err == nil {
		if _, err := idgen.NewSerial(idgen.SerialFormat{Location: loc}, 1); !errors.Is(err, idgen.ErrInvalidLayout) {
			t.Errorf("Europe/Berlin: %v, want ErrInvalidLayout", err)
		}
	}
	// A 3-digit sequence: 1000 serials per millisecond, then the next one.
	clock := newClock(t0)
	s, err := idgen.NewSerial(idgen.SerialFormat{Width: 21, WorkerDigits: 1}, 5, idgen.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	var prev string
	for i := range 1000 {
		v, err := s.Next()
		if err != nil || v <= prev {
			t.Fatalf("serial %d = %s after %s, %v", i, v, prev, err)
		}
		prev = v
	}
	if prev != "202506011200000005999" {
		t.Fatalf("last of the millisecond = %s", prev)
	}
	clock.SetStep(200 * time.Microsecond)
	if v, err := s.Next(); err != nil || v != "202506011200000015000" {
		t.Fatalf("next millisecond = %s, %v", v, err)
	}
	// Clock steps back: as Snowflake.
	clock.SetStep(0)
	clock.Set(t0.Add(-time.Second))
	if _, err := s.Next(); !errors.Is(err, idgen.ErrClockBackwards) {
		t.Fatalf("step back 1 s: %v", err)
	}
}

func TestSerialConcurrent(t *testing.T) {
	s, err := idgen.NewSerial(idgen.SerialFormat{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var prev string
			local := make([]string, 0, 20000)
			for range 20000 {
				v, err := s.Next()
				if err != nil || v <= prev {
					t.Errorf("%s after %s, %v", v, prev, err)
					return
				}
				prev = v
				local = append(local, v)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, v := range local {
				if seen[v] {
					t.Errorf("duplicate %s", v)
				}
				seen[v] = true
			}
		})
	}
	wg.Wait()
}

func TestNanoKeys(t *testing.T) {
	clock := newClock(t0)
	k, err := idgen.NewNanoKeys(idgen.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := k.Next(), k.Next(); a != t0.UnixNano() || b != a+1 {
		t.Fatalf("frozen clock: %d, %d", a, b)
	}
	clock.Set(t0.Add(-time.Second))
	if c := k.Next(); c != t0.UnixNano()+2 {
		t.Fatalf("clock back: %d", c)
	}
	clock.Set(t0.Add(time.Second))
	if d := k.Next(); d != t0.Add(time.Second).UnixNano() {
		t.Fatalf("clock ahead: %d", d)
	}
	real, _ := idgen.NewNanoKeys()
	var wg sync.WaitGroup
	out := make([][]int64, 4)
	for i := range out {
		wg.Go(func() {
			for range 10000 {
				out[i] = append(out[i], real.Next())
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, ks := range out {
		for j, v := range ks {
			if seen[v] || (j > 0 && v <= ks[j-1]) {
				t.Fatalf("key %d repeated or not increasing", v)
			}
			seen[v] = true
		}
	}
}
