package etcdworker_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/etcd/etcdworker"
	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/watchdog"
)

// TestDistinctIDs: twelve Leases at once on three leasers (three etcd
// clients) get twelve different IDs, the lowest ones; List shows them with
// their leases' TTL; their generators issue no ID twice; after Release,
// List is empty.
func TestDistinctIDs(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	p := prefix(t)
	var leasers []*etcdworker.Leaser
	for range 3 {
		// A TTL of 5 s: a loaded machine (-race, other tests) must not
		// lose a lease, nor have TimeToLive round its rest down to 0 s.
		leasers = append(leasers, newLeaser(t, dial(t, server.Endpoints()...), p, etcdworker.WithMax(15), etcdworker.WithTTL(5*time.Second)))
	}
	const n = 12
	leases := make([]*workerid.Lease, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := leasers[i%3].Lease(ctx, "svc")
			if err != nil {
				errs <- err
				return
			}
			leases[i] = l
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var ids []int64
	seen := map[int64]bool{}
	for _, l := range leases {
		ids = append(ids, l.ID())
		sf, err := l.NewSnowflake(ctx, idgen.LayoutWorker10)
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			id, err := sf.Next()
			if err != nil {
				t.Fatal(err)
			}
			if seen[id] {
				t.Fatalf("ID %d issued twice", id)
			}
			seen[id] = true
		}
	}
	slices.Sort(ids)
	for i, id := range ids {
		if id != int64(i) {
			t.Fatalf("worker IDs %v, want 0..%d", ids, n-1)
		}
	}
	hs, err := leasers[0].List(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != n {
		t.Fatalf("List: %d holders, want %d", len(hs), n)
	}
	for i, h := range hs {
		if h.ID != int64(i) || h.Owner == "" || h.TTL <= 0 || h.TTL > 5*time.Second {
			t.Fatalf("List[%d] = %+v", i, h)
		}
	}
	for _, l := range leases {
		release(t, l)
	}
	if hs, err := leasers[0].List(ctx, "svc"); err != nil || len(hs) != 0 {
		t.Fatalf("List after Release: %v, %v", hs, err)
	}
}

// TestBadInput: bad options, service names and worker IDs are refused with
// workerid.ErrInvalid.
func TestBadInput(t *testing.T) {
	cli := dial(t, server.Endpoints()...)
	for name, opts := range map[string][]etcdworker.Option{
		"negative max":    {etcdworker.WithMax(-1)},
		"max above 2^22":  {etcdworker.WithMax(1 << 22)},
		"TTL under 1 s":   {etcdworker.WithTTL(500 * time.Millisecond)},
		"no checkpoints":  {etcdworker.WithCheckpoint(0)},
		"checkpoint 1µs":  {etcdworker.WithCheckpoint(time.Microsecond)},
		"empty prefix":    {etcdworker.WithPrefix("")},
		"prefix ending /": {etcdworker.WithPrefix("/a/")},
	} {
		if _, err := etcdworker.New(cli, opts...); !errors.Is(err, workerid.ErrInvalid) {
			t.Errorf("New with %s: %v, want workerid.ErrInvalid", name, err)
		}
	}
	if _, err := etcdworker.New(nil); !errors.Is(err, workerid.ErrInvalid) {
		t.Errorf("New(nil): %v", err)
	}
	l := newLeaser(t, cli, prefix(t), etcdworker.WithMax(7))
	ctx := ctxFor(t, 10*time.Second)
	for _, s := range []string{"", "a/b", "a b", "{a}"} {
		if _, err := l.Lease(ctx, s); !errors.Is(err, workerid.ErrInvalid) {
			t.Errorf("Lease(%q): %v, want workerid.ErrInvalid", s, err)
		}
	}
	for _, id := range []int64{-1, 8} {
		if _, err := l.HighWater("svc", id); !errors.Is(err, workerid.ErrInvalid) {
			t.Errorf("HighWater(svc, %d): %v, want workerid.ErrInvalid", id, err)
		}
	}
	lease, err := l.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, lease)
	// Worker ID 7 does not fit a layout of 2 worker bits.
	small := idgen.Layout{Name: "small", TimeBits: 41, WorkerBits: 2, SequenceBits: 20, Epoch: idgen.LayoutTwitter.Epoch, Tick: time.Millisecond}
	if _, err := lease.NewSnowflake(ctx, small); !errors.Is(err, workerid.ErrInvalid) {
		t.Errorf("NewSnowflake on a layout too narrow for the max: %v, want workerid.ErrInvalid", err)
	}
}

// TestExhausted: with every ID leased, Lease returns *ExhaustedError and
// leaves no lease or key behind; a released ID is leased again.
func TestExhausted(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	cli := dial(t, server.Endpoints()...)
	l := newLeaser(t, cli, prefix(t), etcdworker.WithMax(1))
	a, err := l.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	before, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Lease(ctx, "svc")
	var ex *workerid.ExhaustedError
	if !errors.As(err, &ex) || !errors.Is(err, workerid.ErrExhausted) || ex.Max != 1 || ex.Service != "svc" {
		t.Fatalf("third Lease: %v, want *ExhaustedError", err)
	}
	after, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Leases) > len(before.Leases) {
		t.Fatalf("the exhausted Lease left its etcd lease: %d leases before, %d after", len(before.Leases), len(after.Leases))
	}
	release(t, a)
	c, err := l.Lease(ctx, "svc")
	if err != nil || c.ID() != a.ID() {
		t.Fatalf("Lease after a release: %v, %v; want worker %d", c, err, a.ID())
	}
	release(t, b)
	release(t, c)
}

// TestLostBeforeTakeover: the holder of the only worker ID loses touch with
// etcd (its link black-holed: a paused link; or down: connections cut and
// refused). Its generator stops (Lost closed, Next refused) before another
// leaser gets the ID, which it does once the server has expired the lease.
func TestLostBeforeTakeover(t *testing.T) {
	t.Parallel() // it mostly waits on timers
	for _, tc := range []struct {
		name  string
		fault func(p *testserver.Proxy)
	}{
		{"link paused", func(p *testserver.Proxy) { p.SetBlackhole(true) }},
		{"link down", func(p *testserver.Proxy) { p.SetDropNew(true); p.Cut() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t, 20*time.Second)
			p := prefix(t)
			proxy := testserver.StartProxy(t, server.Nodes()[0].Addr())
			holder := newLeaser(t, dial(t, proxy.Addr()), p, etcdworker.WithMax(0))
			next := newLeaser(t, dial(t, server.Endpoints()...), p, etcdworker.WithMax(0))
			a, err := holder.Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			sf, err := a.NewSnowflake(ctx, idgen.LayoutWorker10)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(ttl / 3) // renewals answered
			fault := time.Now()
			tc.fault(proxy)
			var b *workerid.Lease
			for b == nil {
				l, err := next.Lease(ctx, "svc")
				switch {
				case err == nil:
					b = l
				case errors.Is(err, workerid.ErrExhausted):
					time.Sleep(20 * time.Millisecond)
				default:
					t.Fatal(err)
				}
			}
			// Read as the takeover returned: Lost must be closed by then.
			lost := closed(a.Lost())
			t.Logf("taken over %v after the fault (TTL %v)", time.Since(fault).Round(time.Millisecond), ttl)
			if !lost {
				t.Fatal("another leaser holds the ID while its holder's lease is not reported lost")
			}
			if _, err := sf.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
				t.Fatalf("Next of the lost holder: %v, want idgen.ErrLeaseLost", err)
			}
			if err := a.Err(); !errors.Is(err, watchdog.ErrExpired) {
				t.Fatalf("Err of the lost lease: %v, want watchdog.ErrExpired", err)
			}
			proxy.Reset()
			a.Release(ctx) // the final mark; the ID is someone else's
			release(t, b)
		})
	}
}

// TestOperatorTakesLease: an operator revokes the holder's etcd lease
// (etcdctl lease revoke) or deletes its key. The ID is free at once, and
// the holder learns at its next renewal (T/6 later): its generator stops,
// with watchdog.ErrNotHeld.
func TestOperatorTakesLease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, cli *clientv3.Client, key string, lease int64)
	}{
		{"lease revoked", func(t *testing.T, cli *clientv3.Client, _ string, lease int64) {
			if _, err := cli.Revoke(ctxFor(t, 5*time.Second), clientv3.LeaseID(lease)); err != nil {
				t.Fatal(err)
			}
		}},
		{"key deleted", func(t *testing.T, cli *clientv3.Client, key string, _ int64) {
			if _, err := cli.Delete(ctxFor(t, 5*time.Second), key); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, 10*time.Second)
			p := prefix(t)
			cli := dial(t, server.Endpoints()...)
			a, err := newLeaser(t, cli, p, etcdworker.WithMax(0)).Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			sf, err := a.NewSnowflake(ctx, idgen.LayoutWorker10)
			if err != nil {
				t.Fatal(err)
			}
			key := p + "/svc/ids/0"
			resp, err := cli.Get(ctx, key)
			if err != nil || len(resp.Kvs) == 0 {
				t.Fatalf("Get %s: %v", key, err)
			}
			tc.fault(t, cli, key, resp.Kvs[0].Lease)
			select {
			case <-a.Lost():
			case <-time.After(ttl / 2):
				t.Fatalf("the lease not reported lost within %v (renewals every %v)", ttl/2, ttl/6)
			}
			if err := a.Err(); !errors.Is(err, watchdog.ErrNotHeld) {
				t.Fatalf("Err: %v, want watchdog.ErrNotHeld", err)
			}
			if _, err := sf.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
				t.Fatalf("Next: %v, want idgen.ErrLeaseLost", err)
			}
			a.Release(ctx)
		})
	}
}

// TestHighWaterHandOver: a holder whose clock is an hour ahead issues IDs
// and releases; the next holder of the ID starts above its last ID, and a
// clock behind that mark (by more than the tolerance) is refused.
func TestHighWaterHandOver(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	p := prefix(t)
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	a, err := newLeaser(t, dial(t, server.Endpoints()...), p, etcdworker.WithMax(0)).Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	sf, err := a.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock(ahead))
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for range 1000 {
		if last, err = sf.Next(); err != nil {
			t.Fatal(err)
		}
	}
	release(t, a)
	b, err := newLeaser(t, dial(t, server.Endpoints()...), p, etcdworker.WithMax(0)).Lease(ctx, "svc")
	if err != nil || b.ID() != a.ID() {
		t.Fatalf("the next holder: %v, %v", b, err)
	}
	defer release(t, b)
	_, err = b.NewSnowflake(ctx, idgen.LayoutWorker10)
	var cb *idgen.ClockBackwardsError
	if !errors.As(err, &cb) {
		t.Fatalf("a clock an hour behind the mark: %v, want *idgen.ClockBackwardsError", err)
	}
	sf2, err := b.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock(ahead))
	if err != nil {
		t.Fatal(err)
	}
	id, err := sf2.Next()
	if err != nil {
		t.Fatal(err)
	}
	if id <= last {
		t.Fatalf("the next holder's first ID %d not above the last holder's %d", id, last)
	}
}

// TestHighWaterNeverLowered: a mark store only raises the mark: an older
// mark stored after a newer one (a former holder's late save) is kept out.
func TestHighWaterNeverLowered(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	hw, err := newLeaser(t, dial(t, server.Endpoints()...), prefix(t)).HighWater("svc", 3)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := hw.Load(ctx); err != nil || !m.IsZero() {
		t.Fatalf("Load of no mark: %v, %v", m, err)
	}
	base := time.Now().Truncate(time.Millisecond)
	for i, step := range []struct{ store, want time.Time }{
		{base.Add(time.Hour), base.Add(time.Hour)},
		{base, base.Add(time.Hour)},                                                          // older: kept out
		{base.Add(2*time.Hour + time.Microsecond), base.Add(2*time.Hour + time.Millisecond)}, // rounded up
	} {
		if err := hw.Store(ctx, step.store); err != nil {
			t.Fatalf("store %d: %v", i+1, err)
		}
		got, err := hw.Load(ctx)
		if err != nil {
			t.Fatalf("load %d: %v", i+1, err)
		}
		if !got.Equal(step.want) {
			t.Fatalf("after storing %v: mark %v, want %v", step.store.Sub(base), got.Sub(base), step.want.Sub(base))
		}
	}
}

// TestHighWaterConcurrentStores: stores racing on one mark end at the
// highest.
func TestHighWaterConcurrentStores(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	var hws []idgen.HighWaterStore
	p := prefix(t)
	for range 4 {
		hw, err := newLeaser(t, dial(t, server.Endpoints()...), p).HighWater("svc", 0)
		if err != nil {
			t.Fatal(err)
		}
		hws = append(hws, hw)
	}
	base := time.Now().Truncate(time.Millisecond)
	var wg sync.WaitGroup
	for i, hw := range hws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				if err := hw.Store(ctx, base.Add(time.Duration(j*4+i)*time.Millisecond)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	got, err := hws[0].Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := base.Add(39 * time.Millisecond); !got.Equal(want) {
		t.Fatalf("mark %v after the stores, want the highest %v", got.Sub(base), want.Sub(base))
	}
}
