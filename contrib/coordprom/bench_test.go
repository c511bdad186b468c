package coordprom_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordkit/coordkit/contrib/coordprom"
	"github.com/coordkit/coordkit/lock"
)

func newBenchMetrics(tb testing.TB) (*coordprom.LockMetrics, *coordprom.IDMetrics) {
	tb.Helper()
	reg := prometheus.NewRegistry()
	lm, err := coordprom.NewLockMetrics(reg, coordprom.WithBackend("redis"))
	if err != nil {
		tb.Fatal(err)
	}
	im, err := coordprom.NewIDMetrics(reg)
	if err != nil {
		tb.Fatal(err)
	}
	return lm, im
}

// TestHooksDoNotAllocate: once a series exists, no hook allocates.
func TestHooksDoNotAllocate(t *testing.T) {
	lm, im := newBenchMetrics(t)
	notObtained := errors.Join(lock.ErrNotObtained)
	for name, f := range map[string]func(){
		"Waited":         func() { lm.Waited("orders", time.Millisecond, nil) },
		"Waited error":   func() { lm.Waited("orders", time.Millisecond, notObtained) },
		"Held":           func() { lm.Held("orders", time.Second) },
		"Renewed":        func() { lm.Renewed("orders", nil) },
		"Released":       func() { lm.Released("orders", lock.ErrNotHeld) },
		"Issued":         func() { im.Issued("order", 1) },
		"SegmentFetched": func() { im.SegmentFetched("order", 1000, time.Millisecond, nil) },
		"SegmentWaited":  func() { im.SegmentWaited("order", time.Millisecond) },
		"ClockBackwards": func() { im.ClockBackwards(time.Second, nil) },
	} {
		f() // warm up: the series is created on first use
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
}

func BenchmarkLockMetrics_Waited(b *testing.B) {
	lm, _ := newBenchMetrics(b)
	lm.Waited("orders", time.Millisecond, nil)
	b.ReportAllocs()
	for b.Loop() {
		lm.Waited("orders", time.Millisecond, nil)
	}
}

func BenchmarkLockMetrics_Waited_parallel(b *testing.B) {
	lm, _ := newBenchMetrics(b)
	lm.Waited("orders", time.Millisecond, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lm.Waited("orders", time.Millisecond, nil)
		}
	})
}

func BenchmarkIDMetrics_Issued(b *testing.B) {
	_, im := newBenchMetrics(b)
	im.Issued("order", 1)
	b.ReportAllocs()
	for b.Loop() {
		im.Issued("order", 1)
	}
}

func BenchmarkIDMetrics_Issued_parallel(b *testing.B) {
	_, im := newBenchMetrics(b)
	im.Issued("order", 1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			im.Issued("order", 1)
		}
	})
}

// BenchmarkCounterVec_WithLabelValues is what Issued would cost without the
// cache: the vector's own lookup on every call (it does not allocate
// either in client_golang v1.25; the cache saves its hashing and read lock).
func BenchmarkCounterVec_WithLabelValues(b *testing.B) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"tag"})
	b.ReportAllocs()
	for b.Loop() {
		v.WithLabelValues("order").Add(1)
	}
}
