package workerid_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
)

// memMark is a high-water store in memory that only raises its mark.
type memMark struct {
	mu   sync.Mutex // protects mark
	mark time.Time
}

func (m *memMark) Load(context.Context) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mark, nil
}

func (m *memMark) Store(_ context.Context, t time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.After(m.mark) {
		m.mark = t
	}
	return nil
}

// TestNewLease: a Lease made by NewLease (a leaser outside the package, as
// the etcd module's) refuses missing fields and bad IDs with ErrInvalid,
// and runs as every Lease: its generator starts above the stored mark,
// Release stores the final mark before it calls Free, and the generator
// stops.
func TestNewLease(t *testing.T) {
	lost := make(chan struct{})
	hw := &memMark{}
	cfg := workerid.LeaseConfig{
		Service: "svc", ID: 3, Max: 7, Lost: lost, Held: func() bool { return true },
		Err: func() error { return workerid.ErrReleased }, HighWater: hw, Checkpoint: time.Second,
	}
	var markAtFree time.Time
	cfg.Free = func(context.Context) error {
		markAtFree, _ = hw.Load(context.Background())
		close(lost)
		return nil
	}
	for name, bad := range map[string]func(c *workerid.LeaseConfig){
		"empty service":  func(c *workerid.LeaseConfig) { c.Service = "" },
		"ID above max":   func(c *workerid.LeaseConfig) { c.ID = 8 },
		"negative ID":    func(c *workerid.LeaseConfig) { c.ID = -1 },
		"no Lost":        func(c *workerid.LeaseConfig) { c.Lost = nil },
		"no Free":        func(c *workerid.LeaseConfig) { c.Free = nil },
		"no checkpoints": func(c *workerid.LeaseConfig) { c.Checkpoint = 0 },
	} {
		c := cfg
		bad(&c)
		if _, err := workerid.NewLease(c); !errors.Is(err, workerid.ErrInvalid) {
			t.Errorf("NewLease with %s: %v, want ErrInvalid", name, err)
		}
	}
	start := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	hw.Store(context.Background(), start)
	l, err := workerid.NewLease(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sf, err := l.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock(func() time.Time { return start.Add(time.Second) }))
	if err != nil {
		t.Fatal(err)
	}
	id, err := sf.Next()
	if err != nil {
		t.Fatal(err)
	}
	if p := idgen.LayoutWorker10.Decompose(id); p.Worker != 3 || !p.Time.After(start) {
		t.Fatalf("first ID %+v: want worker 3 above the mark %v", p, start)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !markAtFree.After(start) {
		t.Fatalf("mark at Free %v: the final mark was not stored before the ID was freed", markAtFree)
	}
	if _, err := sf.Next(); !errors.Is(err, idgen.ErrLeaseLost) || !errors.Is(err, workerid.ErrReleased) {
		t.Fatalf("Next after Release: %v", err)
	}
	if !errors.Is(l.Err(), workerid.ErrReleased) {
		t.Fatalf("Err: %v", l.Err())
	}
}
