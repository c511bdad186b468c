package workerid_test

import (
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/testserver"
)

// TestHighWaterNeverLowered: every leaser's mark store only raises a mark.
// A late save of an old holder (its final mark, a checkpoint retried after
// a lost reply) must not pull the mark below what a newer holder stored,
// or a third holder with a clock behind would start below IDs already
// issued. Each store is given a mark, then an older one, then a newer one.
func TestHighWaterNeverLowered(t *testing.T) {
	check := func(t *testing.T, hw idgen.HighWaterStore) {
		ctx := ctxT(t, 30*time.Second)
		base := time.Now().Truncate(time.Millisecond)
		for i, step := range []struct {
			store, want time.Time
		}{
			{base.Add(time.Hour), base.Add(time.Hour)},
			{base, base.Add(time.Hour)}, // older: kept out
			{base.Add(2 * time.Hour), base.Add(2 * time.Hour)},
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
	t.Run("Redis", func(t *testing.T) {
		hw, err := newRedisLeaser(t, testserver.StartRedis(t)).HighWater("svc", 3)
		if err != nil {
			t.Fatal(err)
		}
		check(t, hw)
	})
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		hw, err := s.leaser(t, s.newTable(t)).HighWater("svc", 3)
		if err != nil {
			t.Fatal(err)
		}
		check(t, hw)
	})
	t.Run("ZooKeeper", func(t *testing.T) {
		z, _ := zkLeaser(t)
		hw, err := z.HighWater("svc", 3)
		if err != nil {
			t.Fatal(err)
		}
		check(t, hw)
	})
}
