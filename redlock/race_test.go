package redlock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

// TestOneOwnerRacingRounds: two goroutines of one owner TryObtain the same
// key at once through one Client. Their rounds race on every master: each
// takes the hold fresh where it comes first and re-enters it elsewhere.
// Both must end up levels of one hold (one token, neither lost). Before, a
// round that came first on more masters than the other's hold could spare
// took that hold for lost: the first lease's Lost closed (a level of a
// live hold reported "not held") and the second got a token of its own.
// Found by internal/modeltest's long mode.
func TestOneOwnerRacingRounds(t *testing.T) {
	c := newClient(t, nil, redlock.WithNodeTimeout(250*time.Millisecond))
	ctx := lock.WithOwner(ctxTimeout(t, 60*time.Second), "o")
	for i := 0; i < 40; i++ {
		key := uniqueKey(t)
		var ls [2]lock.Lease
		var errs [2]error
		var wg sync.WaitGroup
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ls[g], errs[g] = c.TryObtain(ctx, key, lock.WithTTL(time.Duration(5+g)*time.Second))
			}()
		}
		wg.Wait()
		for g := range 2 {
			if errs[g] != nil {
				t.Fatalf("round %d: TryObtain %d: %v", i, g, errs[g])
			}
		}
		for g := range 2 {
			if err := lock.LostCause(ls[g]); err != nil {
				t.Fatalf("round %d: lease %d reports lost beside the other level of its hold: %v", i, g, err)
			}
		}
		if ls[0].Token() != ls[1].Token() {
			t.Fatalf("round %d: one owner's levels have tokens %d and %d", i, ls[0].Token(), ls[1].Token())
		}
		for g := range 2 {
			if err := ls[g].Release(ctx); err != nil {
				t.Fatalf("round %d: release %d: %v", i, g, err)
			}
		}
	}
}
