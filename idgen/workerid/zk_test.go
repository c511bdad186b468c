package workerid_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
)

const zkSession = 2 * time.Second

// zkLeaser dials its own session (as a separate process would have) on a
// root of the test's own.
func zkLeaser(t *testing.T, opts ...workerid.Option) (*workerid.ZKLeaser, *testserver.ZKConn) {
	t.Helper()
	c := zkServer.DialT(t, zkSession, nil)
	opts = append([]workerid.Option{
		workerid.WithRoot("/test/" + strings.ReplaceAll(t.Name(), "/", "_")),
		workerid.WithSessionTimeout(zkSession),
	}, opts...)
	l, err := workerid.NewZK(c.Conn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, c
}

func TestZKConcurrentLeasesAreDistinct(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	const n = 20
	ids := make(chan int64, n)
	leasers := make([]*workerid.ZKLeaser, n)
	for i := range leasers {
		leasers[i], _ = zkLeaser(t)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := leasers[i].Lease(ctx, "orders")
			if err != nil {
				t.Error(err)
				return
			}
			release(t, lease)
			ids <- lease.ID()
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[int64]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("worker ID %d leased twice", id)
		}
		seen[id] = true
	}
	for id := range int64(n) {
		if !seen[id] {
			t.Fatalf("worker ID %d not leased; got %v", id, seen)
		}
	}
	holders, err := leasers[0].List(ctx, "orders")
	if err != nil || len(holders) != n || holders[0].Host == "" || holders[0].PID == 0 {
		t.Fatalf("List: %+v, %v", holders, err)
	}
}

func TestZKSessionExpiryStopsGenerator(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	l, c := zkLeaser(t)
	lease, err := l.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	release(t, lease)
	sf, err := lease.NewSnowflake(ctx, idgen.Layout{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sf.Next(); err != nil {
		t.Fatal(err)
	}
	if err := c.Expire(); err != nil {
		t.Fatal(err)
	}
	waitLost(t, lease, 10*time.Second)
	if _, err := sf.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("Next after session expiry: want ErrLeaseLost, got %v", err)
	}
	// The ID is free for another process.
	l2, _ := zkLeaser(t)
	again, err := l2.Lease(ctx, "svc")
	if err != nil || again.ID() != lease.ID() {
		t.Fatalf("re-lease after expiry: %v, %v", again, err)
	}
	release(t, again)
}

func TestZKPartitionLosesLeaseBeforeSessionExpires(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	l, c := zkLeaser(t)
	lease, err := l.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	release(t, lease)
	cut := time.Now()
	c.Partition(true)
	defer c.Partition(false)
	waitLost(t, lease, 2*zkSession)
	// Lost before the server could expire the session and free the ID.
	if d := time.Since(cut); d >= zkSession {
		t.Fatalf("lease lost %v after the partition; the session times out after %v", d, zkSession)
	}
}

func TestZKReleaseFreesID(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	l, _ := zkLeaser(t)
	a, err := l.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	sf, err := a.NewSnowflake(ctx, idgen.Layout{})
	if err != nil {
		t.Fatal(err)
	}
	last, _ := sf.Next()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sf.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("Next after Release: %v", err)
	}
	b, err := l.Lease(ctx, "svc")
	if err != nil || b.ID() != a.ID() {
		t.Fatalf("re-lease: %v, %v", b, err)
	}
	release(t, b)
	// The next generator starts above the mark Release saved; a clock 2 s
	// behind it is refused.
	_, err = b.NewSnowflake(ctx, idgen.Layout{}, idgen.WithClock(func() time.Time { return time.Now().Add(-2 * time.Second) }))
	var cb *idgen.ClockBackwardsError
	if !errors.As(err, &cb) {
		t.Fatalf("clock behind the mark: want ClockBackwardsError, got %v", err)
	}
	sf2, err := b.NewSnowflake(ctx, idgen.Layout{})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := sf2.Next(); id <= last {
		t.Fatalf("after restart %d <= last %d", id, last)
	}
}

func TestZKHolderKilledFreesID(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	l, c := zkLeaser(t)
	a, err := l.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	// The process dies: its connection goes without a Release; the server
	// expires its session after the timeout and deletes the node.
	c.Partition(true)
	waitLost(t, a, 2*zkSession)
	c.Close()
	l2, _ := zkLeaser(t)
	deadline := time.Now().Add(3 * zkSession)
	for {
		b, err := l2.Lease(ctx, "svc")
		if err != nil {
			t.Fatal(err)
		}
		release(t, b)
		if b.ID() == a.ID() {
			break // the dead holder's ID came back
		}
		if time.Now().After(deadline) {
			t.Fatalf("ID %d not freed %v after its holder died", a.ID(), 3*zkSession)
		}
		time.Sleep(200 * time.Millisecond)
	}
	a.Release(ctx)
}

func TestZKExhaustedAndBadInput(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	if _, err := workerid.NewZK(nil); !errors.Is(err, workerid.ErrInvalid) {
		t.Errorf("nil conn: %v", err)
	}
	l, c := zkLeaser(t, workerid.WithMax(1))
	if _, err := workerid.NewZK(c.Conn, workerid.WithRoot("no-slash")); !errors.Is(err, workerid.ErrInvalid) {
		t.Errorf("bad root: %v", err)
	}
	for range 2 {
		lease, err := l.Lease(ctx, "tiny")
		if err != nil {
			t.Fatal(err)
		}
		release(t, lease)
	}
	_, err := l.Lease(ctx, "tiny")
	if !errors.Is(err, workerid.ErrExhausted) || !strings.Contains(err.Error(), `"tiny"`) {
		t.Fatalf("want ErrExhausted naming tiny, got %v", err)
	}
	if _, err := l.Lease(ctx, "a/b"); !errors.Is(err, workerid.ErrInvalid) {
		t.Errorf("service with a slash: %v", err)
	}
	// A corrupted mark is an error.
	hw, err := l.HighWater("tiny", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := hw.Store(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	root := "/test/" + t.Name()
	if _, err := c.Set(root+"/tiny/hw/0", []byte("garbage"), -1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Delete(root+"/tiny/hw/0", -1) }) // -count=N runs start clean
	if _, err := hw.Load(ctx); err == nil || !strings.Contains(err.Error(), "not a number") {
		t.Errorf("corrupted mark: %v", err)
	}
}
