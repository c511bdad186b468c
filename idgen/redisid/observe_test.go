package redisid_test

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/internal/logtest"
	"github.com/coordkit/coordkit/internal/testserver"
)

type segMetrics struct {
	idgen.NopMetrics
	mu      sync.Mutex
	issued  int
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

func (m *segMetrics) SegmentFetched(tag string, _ int64, _ time.Duration, err error) {
	m.mu.Lock()
	m.fetched = append(m.fetched, err)
	m.tags[tag] = true
	m.mu.Unlock()
}

func (m *segMetrics) SegmentWaited(tag string, _ time.Duration) {
	m.mu.Lock()
	m.waited++
	m.tags[tag] = true
	m.mu.Unlock()
}

// TestSegmentsObserved: Redis killed while a tag is served: the background
// prefetch that fails is logged (Warn, with the tag) and reported, the IDs
// served from memory are counted, and the Next that finds both segments
// used up reports its wait.
func TestSegmentsObserved(t *testing.T) {
	srv := testserver.StartRedis(t)
	m, logs := &segMetrics{tags: map[string]bool{}}, &logtest.Recorder{}
	s := newSegments(t, srv.Client(t), redisid.WithStepBounds(1000, 1000),
		redisid.WithMetrics(m), redisid.WithLogger(slog.New(logs)), redisid.WithFetchTimeout(time.Second))
	ctx := ctxT(t)
	if _, err := s.Next(ctx, "order"); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	served := 1
	for ; served < 2000; served++ {
		if _, err := s.Next(ctx, "order"); err != nil {
			break
		}
	}
	if served != 1000 {
		t.Fatalf("served %d IDs with Redis down, want the 1000 of the segment in memory", served)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.issued != 1000 || m.waited == 0 || len(m.tags) != 1 || !m.tags["order"] {
		t.Fatalf("metrics: %d issued, %d waits, tags %v", m.issued, m.waited, m.tags)
	}
	failed := 0
	for _, err := range m.fetched {
		if err != nil {
			failed++
		}
	}
	if len(m.fetched) < 2 || m.fetched[0] != nil || failed == 0 {
		t.Fatalf("fetches reported: %v", m.fetched)
	}
	var warned bool
	for _, r := range logs.Records() {
		if r.Message == "segment fetch failed" && r.Level == slog.LevelWarn {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no Warn \"segment fetch failed\" in %v", logs.Records())
	}
}
