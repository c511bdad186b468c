package redisid_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

func TestCounterSequence(t *testing.T) {
	ctx := ctxT(t)
	c, err := redisid.NewCounter(sharedClient(t), uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	for want := int64(1); want <= 3; want++ {
		if id, err := c.Next(ctx); err != nil || id != want {
			t.Fatalf("Next = %d, %v; want %d", id, err, want)
		}
	}
	if first, err := c.NextN(ctx, 10); err != nil || first != 4 {
		t.Fatalf("NextN(10) = %d, %v; want 4", first, err)
	}
	if id, err := c.Next(ctx); err != nil || id != 14 {
		t.Fatalf("Next after NextN = %d, %v; want 14", id, err)
	}
}

func TestCounterConcurrent(t *testing.T) {
	ctx := ctxT(t)
	key := uniqueKey(t)
	var (
		mu  sync.Mutex
		all []int64
		wg  sync.WaitGroup
	)
	for range 2 {
		c, _ := redisid.NewCounter(shared.Client(t), key)
		for range 8 {
			wg.Go(func() {
				var ids []int64
				for range 500 {
					id, err := c.Next(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					ids = append(ids, id)
				}
				mu.Lock()
				all = append(all, ids...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if len(all) != 8000 {
		t.Fatalf("%d IDs", len(all))
	}
	noDuplicates(t, all)
	if all[0] != 1 || all[len(all)-1] != 8000 {
		t.Errorf("IDs span [%d, %d], want [1, 8000]", all[0], all[len(all)-1])
	}
}

func TestCounterBadInput(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	if _, err := redisid.NewCounter(rdb, ""); !errors.Is(err, redisid.ErrEmptyKey) {
		t.Errorf("NewCounter(\"\") err = %v", err)
	}
	c, _ := redisid.NewCounter(rdb, uniqueKey(t))
	for _, n := range []int64{0, -1} {
		if _, err := c.NextN(ctx, n); !errors.Is(err, redisid.ErrBadStep) {
			t.Errorf("NextN(%d) err = %v", n, err)
		}
	}
	hash, text := uniqueKey(t), uniqueKey(t)
	rdb.HSet(ctx, hash, "a", 1)
	rdb.Set(ctx, text, "seven", 0)
	for _, key := range []string{hash, text} {
		c, _ := redisid.NewCounter(rdb, key)
		if _, err := c.Next(ctx); !errors.Is(err, redisid.ErrCorrupt) {
			t.Errorf("Next on %s err = %v, want ErrCorrupt", key, err)
		}
		if _, err := redisid.RaiseCounter(ctx, rdb, key, 10); !errors.Is(err, redisid.ErrCorrupt) {
			t.Errorf("RaiseCounter on %s err = %v, want ErrCorrupt", key, err)
		}
	}
	big := uniqueKey(t)
	rdb.Set(ctx, big, "9223372036854775807", 0)
	c, _ = redisid.NewCounter(rdb, big)
	if _, err := c.Next(ctx); !errors.Is(err, redisid.ErrOverflow) {
		t.Errorf("Next at MaxInt64 err = %v, want ErrOverflow", err)
	}
}

func TestRaiseCounter(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	key := uniqueKey(t)
	if v, err := redisid.RaiseCounter(ctx, rdb, key, 1_000_000_000_000_000_000); err != nil || v != 1_000_000_000_000_000_000 {
		t.Fatalf("RaiseCounter = %d, %v", v, err)
	}
	// Exact beyond 2^53: the script never turns the value into a Lua double.
	c, _ := redisid.NewCounter(rdb, key)
	if id, err := c.Next(ctx); err != nil || id != 1_000_000_000_000_000_001 {
		t.Fatalf("Next = %d, %v", id, err)
	}
	if v, err := redisid.RaiseCounter(ctx, rdb, key, 5); err != nil || v != 1_000_000_000_000_000_001 {
		t.Fatalf("RaiseCounter below the value = %d, %v (must not lower it)", v, err)
	}
}

// rollbackTest draws from next, snapshots Redis, draws more, restarts Redis
// from the snapshot and draws again: no value may repeat.
func rollbackTest(t *testing.T, r *testserver.Redis, next func(ctx context.Context) (int64, error)) {
	t.Helper()
	ctx := ctxT(t)
	var ids []int64
	draw := func(n int) {
		t.Helper()
		for range n {
			id, err := next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	draw(50)
	snap, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	draw(200)
	if err := r.RestartFromSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	draw(300)
	noDuplicates(t, ids)
}

func TestCounterRollbackSnapshot(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	key := "rollback:counter"
	c, _ := redisid.NewCounter(rdb, key)
	rollbackTest(t, r, c.Next)
	// After the raise the counter stands above everything handed out.
	if v, err := rdb.Get(context.Background(), key).Int64(); err != nil || v != 550 {
		t.Errorf("counter = %d, %v; want 550 (250 before the rollback, raised, +300)", v, err)
	}
}

func TestCounterNextNRollbackSnapshot(t *testing.T) {
	r := testserver.StartRedis(t)
	c, _ := redisid.NewCounter(r.Client(t), "rollback:counter")
	var ids []int64
	rollbackTest(t, r, func(ctx context.Context) (int64, error) {
		first, err := c.NextN(ctx, 7)
		for i := int64(1); i < 7 && err == nil; i++ {
			ids = append(ids, first+i)
		}
		return first, err
	})
	noDuplicates(t, ids)
}

var _ redis.UniversalClient = (*redis.Client)(nil)
