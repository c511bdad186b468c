package redlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

// lateStart is a go-redis hook that starts each command of its client d
// late (0: at once), as a goroutine of a starved process does: the command
// is sent with the ctx it was given, after the wait.
type lateStart struct{ d atomic.Int64 }

func (h *lateStart) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateStart) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(time.Duration(h.d.Load()))
		return next(ctx, cmd)
	}
}

func (h *lateStart) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRenewalReachesLateMaster: a renewal round decided by a quorum still
// renews the third master, whose command started after the quorum had
// answered (a starved goroutine), so that every healthy master of the hold
// keeps the key for the lease's Until, and the hold keeps its tolerance of
// one master losing its data (see the package documentation). Dropping
// that command when the round returns left the master's key expiring one
// renewal interval (less the drift) before Until: a deletion on one of the
// two others then let another owner take a quorum while the lease still
// reported held (the model-based test saw it under load).
func TestRenewalReachesLateMaster(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdbs := dial(t, addrsOf(shared[:3])...)
	late := &lateStart{}
	rdbs[2].(*redis.Client).AddHook(late)
	c, err := redlock.New(rdbs, redlock.WithNodeTimeout(testNodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	key := uniqueKey(t)
	hash := redlock.DefaultPrefix + "{" + key + "}"
	admin := dial(t, shared[2].Addr())[0]

	const ttl = 3 * time.Second // renewals every second
	owner := "renewed"
	l := mustObtain(t, lock.WithOwner(ctx, owner), c, key, lock.WithTTL(ttl))
	defer l.Release(ctx)
	st := l.(lock.LeaseStatus)
	first := st.Until()
	// The round may have been decided before master 2 answered: wait for
	// its level there.
	for end := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		if ok, err := admin.HExists(ctx, hash, owner).Result(); err != nil || ok {
			break
		}
		if time.Now().After(end) {
			t.Fatal("master 2 never took the hold")
		}
	}
	// From now on master 2's renewals start 150 ms late: the round is
	// decided by masters 0 and 1 before master 2's command is sent.
	late.d.Store(int64(150 * time.Millisecond))
	until := first
	for end := time.Now().Add(ttl); until.Equal(first); until = st.Until() {
		if time.Now().After(end) {
			t.Fatalf("no renewal within %v (Err %v)", ttl, st.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The late command has landed 150 ms (plus scheduling) after the round
	// that set until; the next round is due a second after it.
	time.Sleep(400 * time.Millisecond)
	pttl, err := admin.PTTL(ctx, hash).Result()
	if err != nil {
		t.Fatal(err)
	}
	if u := st.Until(); !u.Equal(until) {
		t.Fatalf("a second renewal came within 400 ms of the first (Until %v, then %v): the host is too slow for this test", until, u)
	}
	const slack = 15 * time.Millisecond // the model-based test's
	if expiry := time.Now().Add(pttl); expiry.Before(until.Add(-slack)) {
		t.Fatalf("master 2's key expires in %v, %v before the lease's Until (%v ahead): its renewal was dropped",
			pttl, until.Sub(expiry).Round(time.Millisecond), time.Until(until).Round(time.Millisecond))
	}
}
