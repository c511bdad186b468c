package idgen_test

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/logtest"
)

type idMetrics struct {
	idgen.NopMetrics
	issued    atomic.Int64
	mu        sync.Mutex
	backwards []error
}

func (m *idMetrics) Issued(tag string, n int) {
	if tag != "" {
		panic("a Snowflake reports the tag \"\"")
	}
	m.issued.Add(int64(n))
}

func (m *idMetrics) ClockBackwards(_ time.Duration, err error) {
	m.mu.Lock()
	m.backwards = append(m.backwards, err)
	m.mu.Unlock()
}

// TestSnowflakeObserved: IDs issued are counted (Next and NextN), and a
// clock stepped back beyond the tolerance is reported to the metrics on
// every refusal and logged at Warn once for a burst of refusals.
func TestSnowflakeObserved(t *testing.T) {
	clk := newClock(t0)
	m, logs := &idMetrics{}, &logtest.Recorder{}
	g, err := idgen.NewSnowflake(idgen.LayoutTwitter, 1, idgen.WithClock(clk.Now),
		idgen.WithMetrics(m), idgen.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := g.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := g.NextN(make([]int64, 100)); n != 100 || err != nil {
		t.Fatal(n, err)
	}
	if got := m.issued.Load(); got != 110 {
		t.Fatalf("issued %d, want 110", got)
	}
	clk.Set(clk.Now().Add(-time.Second))
	for range 3 {
		if _, err := g.Next(); !errors.Is(err, idgen.ErrClockBackwards) {
			t.Fatalf("Next after a 1 s step back: %v", err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.backwards) != 3 || !errors.Is(m.backwards[0], idgen.ErrClockBackwards) {
		t.Fatalf("ClockBackwards calls: %v", m.backwards)
	}
	if len(logs.Records()) != 1 || logs.Records()[0].Level != slog.LevelWarn {
		t.Fatalf("log records %v, want one Warn", logs.Records())
	}
	if got := m.issued.Load(); got != 110 {
		t.Fatalf("issued %d after refusals, want 110", got)
	}
}
