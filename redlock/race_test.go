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

// TestRaisedTokenRecordedInHold: with one master's fencing counter ahead of
// the clock, the lease's token is that master's (the largest); the other
// masters' counters are raised to it, and so is the token their hash
// records for the hold, so that a re-entry of the same owner through
// another client answers the hold's token from any quorum. Before, the
// other masters kept their own (smaller) token in the hash, and a re-entry
// through another client answered by a quorum without the ahead master got
// a token other than its hold's (found by internal/modeltest's long mode).
func TestRaisedTokenRecordedInHold(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 20*time.Second), "o")
	rdbs := dial(t, addrsOf(shared)...)
	c := newClient(t, nil, redlock.WithNodeTimeout(250*time.Millisecond))
	for try := 0; ; try++ {
		key := uniqueKey(t)
		ahead := time.Now().UnixMicro() + 1e12
		if err := rdbs[1].Set(ctx, redlock.DefaultPrefix+"{"+key+"}:fence", ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
		l := mustObtain(t, ctx, c, key, lock.WithTTL(10*time.Second))
		if l.Token() != ahead+1 { // master 1 was not in the quorum that granted it
			l.Release(ctx)
			if try == 50 {
				t.Fatal("master 1 never answered within the granting quorum in 50 tries")
			}
			continue
		}
		recorded := 0
		for _, rdb := range rdbs {
			if v, err := rdb.HGet(ctx, redlock.DefaultPrefix+"{"+key+"}", "\x00t").Int64(); err == nil && v == l.Token() {
				recorded++
			}
		}
		l.Release(ctx)
		if recorded < 3 {
			t.Fatalf("%d masters record the lease's token %d for the hold, want a quorum (3)", recorded, l.Token())
		}
		return
	}
}
