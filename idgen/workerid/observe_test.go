package workerid_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/logtest"
)

type leaseMetrics struct {
	idgen.NopMetrics
	mu   sync.Mutex
	lost []string
}

func (m *leaseMetrics) LeaseLost(service string, worker int64, cause error) {
	m.mu.Lock()
	m.lost = append(m.lost, service)
	m.mu.Unlock()
}

// TestLeaseLossObserved: a lease the server drops (Redis: its key deleted;
// ZooKeeper: its session expired) is logged at Error with the service and
// worker ID, and reported once to LeaseLost; a lease released is neither.
func TestLeaseLossObserved(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m, logs := &leaseMetrics{}, &logtest.Recorder{}
			c := b.start(t)(workerid.WithMetrics(m), workerid.WithLogger(slog.New(logs)))
			l, err := c.Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			c.lose(t, l)
			select {
			case <-l.Lost():
			case <-time.After(15 * time.Second):
				t.Fatal("lease not lost within 15 s")
			}
			next, err := c.Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			if err := next.Release(ctx); err != nil {
				t.Fatal(err)
			}
			m.mu.Lock()
			lost := append([]string(nil), m.lost...)
			m.mu.Unlock()
			if len(lost) != 1 || lost[0] != "svc" {
				t.Fatalf("LeaseLost calls: %q, want one for svc", lost)
			}
			var found bool
			for _, r := range logs.Records() {
				if r.Level != slog.LevelError {
					continue
				}
				attrs := logtest.Attrs(r)
				if attrs["service"] == "svc" && attrs["worker"] == l.ID() && errors.Is(attrs["cause"].(error), l.Err()) {
					found = true
				}
			}
			if !found {
				t.Fatalf("no Error record for worker %d in %v", l.ID(), logs.Records())
			}
		})
	}
}
