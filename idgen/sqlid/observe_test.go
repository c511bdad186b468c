package sqlid_test

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/sqlid"
	"github.com/coordkit/coordkit/internal/logtest"
)

type segMetrics struct {
	idgen.NopMetrics
	mu      sync.Mutex
	issued  int
	sizes   []int64
	fetched []error
	waited  int
	tags    map[string]bool
}

func (m *segMetrics) Issued(tag string, n int) {
	m.mu.Lock()
	m.issued += n
	m.tags[tag] = true
	m.mu.Unlock()
}

func (m *segMetrics) SegmentFetched(tag string, size int64, _ time.Duration, err error) {
	m.mu.Lock()
	m.fetched = append(m.fetched, err)
	m.sizes = append(m.sizes, size)
	m.tags[tag] = true
	m.mu.Unlock()
}

func (m *segMetrics) SegmentWaited(tag string, _ time.Duration) {
	m.mu.Lock()
	m.waited++
	m.tags[tag] = true
	m.mu.Unlock()
}

// TestSegmentsObserved: the database killed while a tag is served: the IDs
// served are counted (Issued), each reservation is reported with its size
// (the row's step first), the background fetch that fails is logged (Warn,
// with the tag) and reported, and the Next that finds both segments used up
// reports its wait.
func TestSegmentsObserved(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		keepRunning(t, b.server())
		ctx := ctxT(t)
		m, logs := &segMetrics{tags: map[string]bool{}}, &logtest.Recorder{}
		s, err := sqlid.NewLeaf(b.openDB(t), b.dialect, sqlid.WithTable(uniqueName(t)), sqlid.WithMaxStep(1000),
			sqlid.WithMetrics(m), sqlid.WithLogger(slog.New(logs)), sqlid.WithFetchTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.CreateTable(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Register(ctx, "order", 1, 1000, ""); err != nil {
			t.Fatal(err)
		}
		g, _ := s.For("order")
		draw(t, ctx, g, 1)
		b.server().Kill()
		more, err := drainUntilError(t, g, 5000)
		checkDownError(t, err)
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.issued != 1+len(more) || len(more) != 999 || m.waited < 2 || len(m.tags) != 1 || !m.tags["order"] {
			t.Fatalf("metrics: %d issued (%d after the kill), %d waits, tags %v", m.issued, len(more), m.waited, m.tags)
		}
		failed := 0
		for _, err := range m.fetched {
			if err != nil {
				failed++
			}
		}
		if len(m.fetched) < 2 || m.fetched[0] != nil || m.sizes[0] != 1000 || failed == 0 {
			t.Fatalf("fetches reported: %v, sizes %v", m.fetched, m.sizes)
		}
		r, attrs, ok := logs.Find("segment fetch failed")
		if !ok || r.Level != slog.LevelWarn || attrs["tag"] != "order" {
			t.Fatalf("no Warn \"segment fetch failed\" with the tag in %v", logs.Records())
		}
	})
}
