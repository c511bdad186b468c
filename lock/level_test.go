package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
)

// nestedCase is one lock whose nested levels take different TTLs.
type nestedCase struct {
	name string
	// outer and other lock the same key for one owner and for another.
	outer, other lock.Locker
}

func nestedCases(t *testing.T) []nestedCase {
	c := newClient(t, nil)
	other := newClient(t, nil)
	rw := lock.NewRW(shared.Client(t))
	t.Cleanup(func() { rw.Close() })
	rw2 := lock.NewRW(shared.Client(t))
	t.Cleanup(func() { rw2.Close() })
	return []nestedCase{
		{name: "Client", outer: c, other: other},
		{name: "RW write, other writes", outer: rw.Write(), other: rw2.Write()},
		{name: "RW read, other writes", outer: rw.Read(), other: rw2.Write()},
	}
}

// TestNestedShorterTTLKeepsHold: a level never shortens the hold. An outer
// level of 6 s and a nested one of 200 ms on the same key: while the inner
// level is held, after it is released, and long after its 200 ms, the
// outer lease reports held and no other owner can take the lock. Before,
// acquire.lua re-armed the hash with 200 ms (rw_acquire.lua and
// rw_renew.lua set the writer's expiry and the reader's score to now +
// 200 ms), the outer hold's watchdog renewed only every 2 s, and another
// owner took the lock while the outer lease reported held: two holders.
func TestNestedShorterTTLKeepsHold(t *testing.T) {
	for _, tc := range nestedCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			ctx := lock.WithOwner(ctxTimeout(t, 20*time.Second), "outer-"+uniqueKey(t))
			key := uniqueKey(t)
			outer := mustObtain(t, ctx, tc.outer, key, lock.WithTTL(6*time.Second))
			inner := mustObtain(t, ctx, tc.outer, key, lock.WithTTL(200*time.Millisecond))
			if inner.Token() != outer.Token() {
				t.Fatalf("re-entry token %d, want the hold's %d", inner.Token(), outer.Token())
			}
			check := func(when string) {
				t.Helper()
				// Three times the inner TTL, and more than two of its renewals.
				time.Sleep(600 * time.Millisecond)
				if err := lock.LostCause(outer); err != nil {
					t.Fatalf("%s: outer lease lost: %v", when, err)
				}
				l, err := tc.other.TryObtain(lock.WithOwner(ctx, "other"), key, lock.WithTTL(time.Second))
				if err == nil {
					l.Release(ctx)
					t.Fatalf("%s: another owner took the lock while the outer lease (6 s) reports held until %v",
						when, outer.(lock.LeaseStatus).Until().Format(time.StampMilli))
				}
				if !errors.Is(err, lock.ErrNotObtained) {
					t.Fatalf("%s: TryObtain: %v", when, err)
				}
			}
			check("inner level held")
			if err := inner.Release(ctx); err != nil {
				t.Fatalf("inner Release: %v", err)
			}
			check("inner level released")
			if err := outer.Release(ctx); err != nil {
				t.Fatalf("outer Release: %v", err)
			}
		})
	}
}

// TestNestedLongerTTLRaisesHold: a nested level with a longer TTL than the
// hold's makes it the hold's TTL: the lease's Until moves to the nested
// level's deadline at once, and the watchdog's renewals set the longer TTL
// (before, they set the first level's 300 ms, so the key's expiry fell
// back from 6 s to 300 ms at the first renewal, 100 ms later).
func TestNestedLongerTTLRaisesHold(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), "o")
	rdb := shared.Client(t)
	c := newClient(t, nil, lock.WithPrefix("nested:"))
	key := uniqueKey(t)
	// 2 s: the re-entry must find the outer hold there (at 300 ms a test
	// process stalled past it saw the hold expire first).
	outer := mustObtain(t, ctx, c, key, lock.WithTTL(2*time.Second))
	sent := time.Now()
	inner := mustObtain(t, ctx, c, key, lock.WithTTL(12*time.Second))
	if u := inner.(lock.LeaseStatus).Until(); u.Before(sent.Add(12 * time.Second)) {
		t.Fatalf("Until after a 12 s re-entry: %v from its send, want at least 12 s", u.Sub(sent))
	}
	// Wait for two renewals of the hold (every 667 ms) to have run, then
	// compare the key's expiry with the lease's deadline (the last
	// renewal's send time plus the TTL it set), not with a fixed 5 s: a
	// starved host (load 23 on 2 cores) may read PTTL a second late.
	status := outer.(lock.LeaseStatus)
	for i, u := 0, status.Until(); i < 2; i++ {
		for !status.Until().After(u) {
			if ctx.Err() != nil {
				t.Fatal("the hold was not renewed")
			}
			time.Sleep(5 * time.Millisecond)
		}
		u = status.Until()
	}
	until := status.Until()
	d := rdb.PTTL(ctx, "nested:{"+key+"}").Val()
	if left := time.Until(until) - time.Millisecond; d < left || until.Sub(sent) < 12*time.Second {
		t.Fatalf("PTTL after the hold's renewals: %v, want at least the lease's %v left (the nested level's 12 s, deadline %v after the re-entry)", d, left, until.Sub(sent))
	}
	if err := lock.LostCause(outer); err != nil {
		t.Fatal(err)
	}
	for _, l := range []lock.Lease{inner, outer} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReleaseAfterLossCounterAhead: a release of a hold that was lost must
// answer ErrNotHeld (and report the loss: Lost closes), even when the next
// holder's token is exactly the lost hold's token + 1, as it is when the
// fencing counter is ahead of the server's clock (a failover to a server
// whose clock lags). Before, release.lua and simple_release.lua took
// "counter == token + 1" for "my earlier release ran" and answered nil.
func TestReleaseAfterLossCounterAhead(t *testing.T) {
	rdb := shared.Client(t)
	cases := []struct {
		name           string
		a, b           lock.Locker
		lockKey, fence func(key string) string
	}{
		{"Client", newClient(t, nil, lock.WithPrefix("ahead:")), newClient(t, nil, lock.WithPrefix("ahead:")),
			func(k string) string { return "ahead:{" + k + "}" }, func(k string) string { return "ahead:{" + k + "}:fence" }},
		{"Simple", lock.NewSimple(rdb, lock.WithPrefix("ahead:")), lock.NewSimple(rdb, lock.WithPrefix("ahead:")),
			func(k string) string { return "ahead:simple:{" + k + "}" }, func(k string) string { return "ahead:simple:{" + k + "}:fence" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if s, ok := tc.a.(*lock.Simple); ok {
				t.Cleanup(func() { s.Close(); tc.b.(*lock.Simple).Close() })
			}
			ctx := ctxTimeout(t, 10*time.Second)
			key := uniqueKey(t)
			ahead := time.Now().UnixMicro() + 1e12 // the counter ~11 days ahead of the clock
			if err := rdb.Set(ctx, tc.fence(key), strconv.FormatInt(ahead, 10), 0).Err(); err != nil {
				t.Fatal(err)
			}
			a := mustObtain(t, lock.WithOwner(ctx, "a"), tc.a, key, lock.WithTTL(10*time.Second))
			if a.Token() != ahead+1 {
				t.Fatalf("token %d, want the counter + 1 = %d", a.Token(), ahead+1)
			}
			// The hold is lost: evicted, deleted by an operator, failed over.
			if err := rdb.Del(ctx, tc.lockKey(key)).Err(); err != nil {
				t.Fatal(err)
			}
			b := mustObtain(t, lock.WithOwner(ctx, "b"), tc.b, key, lock.WithTTL(10*time.Second))
			if b.Token() != a.Token()+1 {
				t.Fatalf("the next holder's token %d, want %d (the case under test)", b.Token(), a.Token()+1)
			}
			err := a.Release(ctx)
			if !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("release of the lost hold: %v, want ErrNotHeld (another owner holds the lock)", err)
			}
			select {
			case <-a.Lost():
			case <-ctx.Done():
				t.Fatal("the lost lease's Lost did not close after its release answered ErrNotHeld")
			}
			if err := lock.LostCause(a); !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("Err of the lost lease: %v", err)
			}
			if err := b.Release(ctx); err != nil {
				t.Fatalf("the holder's release: %v", err)
			}
		})
	}
}

// TestReleaseRecordNamesHold: the answer a release keeps for a resend is
// stored under a key that names the released level, for the release
// window, and only the release that ran gets it.
func TestReleaseRecordNamesHold(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	c := newClient(t, nil, lock.WithPrefix("rec:"), lock.WithReleaseWindow(5*time.Second))
	key := uniqueKey(t)
	l := mustObtain(t, ctx, c, key)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	markers := rdb.Keys(ctx, fmt.Sprintf("rec:{%s}:r:*", key)).Val()
	if len(markers) != 1 {
		t.Fatalf("release markers %v, want one", markers)
	}
	if d := rdb.PTTL(ctx, markers[0]).Val(); d <= 0 || d > 5*time.Second {
		t.Fatalf("marker PTTL %v, want the release window (5 s)", d)
	}
	_ = context.Background
}

// TestRWShortReaderKeepsLongReader: two owners read, one with 6 s and one
// with 200 ms; the short one renews, then leaves. The long reader still
// holds, so no writer may enter. Before, the readers zset got its first
// expiry from the short reader's renewal (200 ms) and vanished with it,
// taking the long reader's entry along: a writer entered beside a reader.
func TestRWShortReaderKeepsLongReader(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rw := lock.NewRW(shared.Client(t))
	t.Cleanup(func() { rw.Close() })
	key := uniqueKey(t)
	long := mustObtain(t, lock.WithOwner(ctx, "long"), rw.Read(), key, lock.WithTTL(6*time.Second))
	// 1.5 s, renewed every 500 ms: with 200 ms, a renewal starved for
	// 134 ms (load 23 on 2 cores) would lose the short reader first.
	const shortTTL = 1500 * time.Millisecond
	short := mustObtain(t, lock.WithOwner(ctx, "short"), rw.Read(), key, lock.WithTTL(shortTTL))
	first := short.(lock.LeaseStatus).Until()
	for !short.(lock.LeaseStatus).Until().After(first) { // a renewal of the short reader
		if err := lock.LostCause(short); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the short reader was never renewed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := short.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(shortTTL + 300*time.Millisecond) // past the expiry the short reader's renewal set
	if l, err := rw.Write().TryObtain(lock.WithOwner(ctx, "writer"), key); err == nil {
		l.Release(ctx)
		t.Fatal("a writer entered while a reader (6 s) holds the read side")
	} else if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatal(err)
	}
	if err := long.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
