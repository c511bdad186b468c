package coordprom_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/coordkit/coordkit/contrib/coordprom"
	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// stepClock is a clock that tests move by hand.
type stepClock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newIDMetrics(t *testing.T, reg prometheus.Registerer) *coordprom.IDMetrics {
	t.Helper()
	m, err := coordprom.NewIDMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSnowflake: IDs issued one by one and in batches are counted under the
// tag "", and a clock stepped back by a second past the tolerance is a
// refusal counted with how far behind it was.
func TestSnowflake(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newIDMetrics(t, reg)
	clk := &stepClock{now: time.Now()}
	sf, err := idgen.NewSnowflake(idgen.Layout{}, 1, idgen.WithClock(clk.Now),
		idgen.WithMetrics(m), idgen.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := sf.Next(); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Millisecond)
	}
	if n, err := sf.NextN(make([]int64, 5)); err != nil || n != 5 {
		t.Fatalf("NextN = %d, %v", n, err)
	}
	clk.Add(-time.Second)
	var cbe *idgen.ClockBackwardsError
	if _, err := sf.Next(); !errors.As(err, &cbe) {
		t.Fatalf("Next after the clock stepped back: %v, want *ClockBackwardsError", err)
	}

	if got := count(t, reg, "coordkit_ids_issued_total", map[string]string{"tag": ""}); got != 15 {
		t.Errorf("issued %v, want 15", got)
	}
	if got := count(t, reg, "coordkit_ids_clock_backwards_total", nil); got != 1 {
		t.Errorf("clock backwards %v, want 1", got)
	}
	n, sum, _ := sample(t, reg, "coordkit_ids_clock_backwards_seconds", nil)
	if n != 1 || !near(sum, cbe.Behind.Seconds(), 1e-9) || !near(sum, 1, 0.002) {
		t.Errorf("clock behind: %v observations summing to %v s, want 1 of %v (about 1 s)", n, sum, cbe.Behind)
	}
}

// TestSegments: redisid Segments on a real Redis: IDs issued, segments
// fetched and reserved, the first call's wait; then Redis killed, a fetch
// that failed.
func TestSegments(t *testing.T) {
	srv := testserver.StartRedis(t)
	reg := prometheus.NewRegistry()
	m := newIDMetrics(t, reg)
	s, err := redisid.NewSegments(srv.Client(t), redisid.WithStepBounds(100, 100),
		redisid.WithMetrics(m), redisid.WithLogger(quiet), redisid.WithFetchTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 250 {
		if _, err := s.Next(ctx, "order"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Next(ctx, "invoice"); err != nil {
		t.Fatal(err)
	}
	tag := func(tag string, kv ...string) map[string]string {
		m := map[string]string{"tag": tag}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	// 250 IDs of 100-ID segments: 3 used, and a 4th prefetched when 15 IDs
	// of the 3rd were taken; the hook reports a fetch before Stats shows it.
	order := mustFor(t, s, "order")
	eventually(t, 5*time.Second, "the 4th segment ready", func() bool { return order.Stats().Ready })
	fetched := count(t, reg, "coordkit_ids_segment_fetches_total", tag("order", "result", "ok"))
	if stats := order.Stats(); fetched != 4 || stats.Fetches != 4 {
		t.Errorf("order: %v fetches counted, Stats says %d, want 4", fetched, stats.Fetches)
	}
	if got := count(t, reg, "coordkit_ids_segment_fetches_total", tag("invoice", "result", "ok")); got != 1 {
		t.Errorf("invoice: %v fetches counted, want 1", got)
	}
	if got := count(t, reg, "coordkit_ids_segment_reserved_total", tag("order")); got != 100*fetched {
		t.Errorf("order: %v IDs reserved, want %v", got, 100*fetched)
	}
	if got := count(t, reg, "coordkit_ids_segment_fetch_seconds", tag("order")); got != fetched {
		t.Errorf("order: %v fetch round trips observed, want %v", got, fetched)
	}
	for tg, issued := range map[string]float64{"order": 250, "invoice": 1} {
		if got := count(t, reg, "coordkit_ids_issued_total", tag(tg)); got != issued {
			t.Errorf("%s: %v issued, want %v", tg, got, issued)
		}
		waits := count(t, reg, "coordkit_ids_segment_waits_total", tag(tg))
		if n := count(t, reg, "coordkit_ids_segment_wait_seconds", tag(tg)); waits < 1 || n != waits {
			t.Errorf("%s: %v waits counted, %v observed, want as many, at least the first call's", tg, waits, n)
		}
	}

	srv.Kill()
	for range 200 {
		if _, err := s.Next(ctx, "order"); err != nil {
			break
		}
	}
	eventually(t, 5*time.Second, "failed fetch counted", func() bool {
		n, _, _ := sample(t, reg, "coordkit_ids_segment_fetches_total", tag("order", "result", "error"))
		return n >= 1
	})
}

func mustFor(t *testing.T, s *redisid.Segments, tag string) *redisid.Segment {
	t.Helper()
	g, err := s.For(tag)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestWorkerLeaseLost: a worker lease whose Redis key is deleted is lost
// and counted under its service; a lease released is not counted.
func TestWorkerLeaseLost(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newIDMetrics(t, reg)
	rdb := shared.Client(t)
	// 1.5 s: both leases must outlive a starved renewal (load 23 on 2
	// cores) until the deletion and kept's Release; 300 ms left 200 ms.
	leaser, err := workerid.NewRedis(rdb, workerid.WithMetrics(m), workerid.WithLogger(quiet),
		workerid.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc := "svc-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	kept, err := leaser.Lease(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := leaser.Lease(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	key := "coordkit:worker:{" + svc + "}:" + strconv.FormatInt(l.ID(), 10)
	if n, err := rdb.Del(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("DEL %s = %d, %v", key, n, err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost 5 s after its key was deleted")
	}
	if err := kept.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "lease loss counted", func() bool {
		n, _, _ := sample(t, reg, "coordkit_worker_leases_lost_total", map[string]string{"service": svc})
		return n == 1
	})
	if n := testutil.CollectAndCount(reg, "coordkit_worker_leases_lost_total"); n != 1 {
		t.Errorf("%d lease-loss series, want 1", n)
	}
}

// TestIDRegistration: the ID metrics register once per registry; two sets
// on one registry need a constant label each, from WrapRegistererWith.
func TestIDRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	newIDMetrics(t, reg)
	_, err := coordprom.NewIDMetrics(reg)
	if are := (prometheus.AlreadyRegisteredError{}); !errors.As(err, &are) {
		t.Fatalf("second NewIDMetrics: %v, want a prometheus.AlreadyRegisteredError", err)
	}

	reg = prometheus.NewRegistry()
	for i, gen := range []string{"orders", "invoices"} {
		m := newIDMetrics(t, prometheus.WrapRegistererWith(prometheus.Labels{"generator": gen}, reg))
		m.Issued("", i+1)
	}
	for i, gen := range []string{"orders", "invoices"} {
		if got := count(t, reg, "coordkit_ids_issued_total", map[string]string{"generator": gen}); got != float64(i+1) {
			t.Errorf("issued by %s: %v, want %d", gen, got, i+1)
		}
	}
}
