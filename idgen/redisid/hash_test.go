package redisid_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// TestHashExactSequence: a hash created by hand with HSET, as in the Spring
// Boot recipe, yields 1, 6, 11, ….
func TestHashExactSequence(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	key := uniqueKey(t)
	if err := rdb.HSet(ctx, key, "offset", 1, "step", 5, "current", 1, "start", 0).Err(); err != nil {
		t.Fatal(err)
	}
	h, err := redisid.NewHash(rdb, key)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for range 5 {
		id, err := h.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	if want := []int64{1, 6, 11, 16, 21}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	vals, _ := rdb.HGetAll(ctx, key).Result()
	if vals["current"] != "21" || vals["start"] != "1" || vals["offset"] != "1" || vals["step"] != "5" {
		t.Errorf("hash after 5 IDs = %v", vals)
	}
}

func TestCreateHash(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	key := uniqueKey(t)
	if ok, err := redisid.CreateHash(ctx, rdb, key, 100, 3); err != nil || !ok {
		t.Fatalf("CreateHash = %v, %v", ok, err)
	}
	h, _ := redisid.NewHash(rdb, key)
	for _, want := range []int64{100, 103, 106} {
		if id, err := h.Next(ctx); err != nil || id != want {
			t.Fatalf("Next = %d, %v; want %d", id, err, want)
		}
	}
	if ok, err := redisid.CreateHash(ctx, rdb, key, 1, 1); err != nil || ok {
		t.Fatalf("CreateHash over an existing hash = %v, %v; want false", ok, err)
	}
	if id, err := h.Next(ctx); err != nil || id != 109 {
		t.Fatalf("Next after a refused CreateHash = %d, %v; want 109", id, err)
	}
	for _, step := range []int64{0, -3} {
		if _, err := redisid.CreateHash(ctx, rdb, uniqueKey(t), 1, step); !errors.Is(err, redisid.ErrBadStep) {
			t.Errorf("CreateHash step %d err = %v", step, err)
		}
	}
	if _, err := redisid.CreateHash(ctx, rdb, "", 1, 1); !errors.Is(err, redisid.ErrEmptyKey) {
		t.Errorf("CreateHash empty key err = %v", err)
	}
}

// TestHashDisjointNodes: k hashes with step k and offsets 1..k (one per Redis
// node) hand out disjoint series that together cover 1..n.
func TestHashDisjointNodes(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	const k = 3
	var all []int64
	for i := range int64(k) {
		key := uniqueKey(t)
		redisid.CreateHash(ctx, rdb, key, i+1, k)
		h, _ := redisid.NewHash(rdb, key)
		for range 10 {
			id, err := h.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, id)
		}
	}
	slices.Sort(all)
	for i, id := range all {
		if id != int64(i+1) {
			t.Fatalf("series overlap or leave a gap: %v", all)
		}
	}
}

func TestHashConcurrent(t *testing.T) {
	ctx := ctxT(t)
	key := uniqueKey(t)
	redisid.CreateHash(ctx, sharedClient(t), key, 7, 2)
	var (
		mu  sync.Mutex
		all []int64
		wg  sync.WaitGroup
	)
	for range 2 {
		h, _ := redisid.NewHash(shared.Client(t), key)
		for range 8 {
			wg.Go(func() {
				var ids []int64
				for range 300 {
					id, err := h.Next(ctx)
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
	noDuplicates(t, all)
	for i, id := range all {
		if want := 7 + 2*int64(i); id != want {
			t.Fatalf("ID %d = %d, want %d (no gaps, no repeats)", i, id, want)
		}
	}
}

func TestHashCorrupt(t *testing.T) {
	ctx := ctxT(t)
	rdb := sharedClient(t)
	for _, tc := range []struct {
		name  string
		setup func(key string)
		want  error
	}{
		{"missing key", func(string) {}, redisid.ErrNoHash},
		{"string key", func(k string) { rdb.Set(ctx, k, "1", 0) }, redisid.ErrCorrupt},
		{"non-number step", func(k string) { rdb.HSet(ctx, k, "offset", 1, "step", "five", "current", 1, "start", 0) }, redisid.ErrCorrupt},
		{"non-number current", func(k string) { rdb.HSet(ctx, k, "offset", 1, "step", 5, "current", "x", "start", 1) }, redisid.ErrCorrupt},
		{"fraction", func(k string) { rdb.HSet(ctx, k, "offset", 1.5, "step", 5, "current", 1, "start", 0) }, redisid.ErrCorrupt},
		{"missing field", func(k string) { rdb.HSet(ctx, k, "offset", 1, "step", 5, "start", 0) }, redisid.ErrCorrupt},
		{"zero step", func(k string) { rdb.HSet(ctx, k, "offset", 1, "step", 0, "current", 1, "start", 1) }, redisid.ErrCorrupt},
		{"overflow", func(k string) {
			rdb.HSet(ctx, k, "offset", 1, "step", 5, "current", "9223372036854775807", "start", 1)
		}, redisid.ErrOverflow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			tc.setup(key)
			h, _ := redisid.NewHash(rdb, key)
			_, err := h.Next(ctx)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
	if _, err := redisid.NewHash(rdb, ""); !errors.Is(err, redisid.ErrEmptyKey) {
		t.Errorf("NewHash(\"\") err = %v", err)
	}
}

func TestHashRollbackSnapshot(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	if _, err := redisid.CreateHash(context.Background(), rdb, "rollback:hash", 2, 3); err != nil {
		t.Fatal(err)
	}
	h, _ := redisid.NewHash(rdb, "rollback:hash")
	var ids []int64
	rollbackTest(t, r, func(ctx context.Context) (int64, error) {
		id, err := h.Next(ctx)
		ids = append(ids, id)
		return id, err
	})
	for _, id := range ids {
		if id%3 != 2 {
			t.Fatalf("ID %d left the series 2 mod 3", id)
		}
	}
}
