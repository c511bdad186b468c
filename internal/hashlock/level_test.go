package hashlock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/internal/testserver"
)

// TestNodeLevelNeverShortensHold: a level never shortens the hold. A
// re-entry with a shorter TTL, the resend of that re-entry, a renewal with
// a shorter TTL and the release of an inner level all leave the key's
// expiry where the longest-lived level put it; a re-entry or renewal with a
// longer TTL raises it. (Before, acquire.lua and renew.lua set PEXPIRE to
// their own TTL and release.lua to its level's: PTTL fell from ~6000 to
// ~200 ms under a live 6 s level, and another owner could take the lock.)
func TestNodeLevelNeverShortensHold(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	n := hashlock.Node{}
	for _, fair := range []bool{false, true} {
		key := uniqueKey(t)
		k := n.Keys(key)
		pttl := func() time.Duration {
			t.Helper()
			d, err := rdb.PTTL(ctx, k.Lock).Result()
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		wantAtLeast := func(what string, min time.Duration) {
			t.Helper()
			if d := pttl(); d < min {
				t.Fatalf("fair=%v: after %s: PTTL %v, want at least %v", fair, what, d, min)
			}
		}
		acquire := func(req string, ttl time.Duration) hashlock.NodeResult {
			t.Helper()
			r, err := n.Acquire(ctx, hashlock.NewServer(rdb), key, hashlock.NodeAcquire{Owner: "o", TTL: ttl, Request: req, Fair: fair})
			if err != nil || !r.Held {
				t.Fatalf("fair=%v: acquire %s: %+v, %v", fair, req, r, err)
			}
			return r
		}
		acquire("c:1", 6*time.Second)
		acquire("c:2", 200*time.Millisecond)
		wantAtLeast("a re-entry with 200 ms", 5*time.Second)
		acquire("c:2", 200*time.Millisecond) // the same call resent
		wantAtLeast("the re-entry resent", 5*time.Second)
		if ok, err := n.Renew(ctx, hashlock.NewServer(rdb), key, "o", "c:2", 200*time.Millisecond); err != nil || !ok {
			t.Fatalf("renew: %v, %v", ok, err)
		}
		wantAtLeast("a renewal with 200 ms", 5*time.Second)
		if left, err := n.Release(ctx, hashlock.NewServer(rdb), key, hashlock.NodeRelease{Owner: "o", Request: "c:3", Level: "c:2"}); err != nil || left != 1 {
			t.Fatalf("release of the inner level: %d, %v", left, err)
		}
		wantAtLeast("the inner level's release", 5*time.Second)
		acquire("c:4", 20*time.Second)
		wantAtLeast("a re-entry with 20 s", 19*time.Second)
		if ok, err := n.Renew(ctx, hashlock.NewServer(rdb), key, "o", "c:1", 6*time.Second); err != nil || !ok {
			t.Fatalf("renew: %v, %v", ok, err)
		}
		wantAtLeast("a renewal with 6 s", 19*time.Second)
		if ok, err := n.Renew(ctx, hashlock.NewServer(rdb), key, "o", "c:1", 40*time.Second); err != nil || !ok {
			t.Fatalf("renew: %v, %v", ok, err)
		}
		wantAtLeast("a renewal with 40 s", 39*time.Second)
		rdb.Del(ctx, k.Lock)
	}
}

// TestNodeReleaseResent: a Node's release names no token; sent again by
// go-redis after its reply was lost, it must find its answer (released)
// under its marker. Before, the outermost release recorded its answer only
// in the fencing counter, which a Node cannot check, and the resend
// answered -1 "not held" for a lock it freed (one redlock master's vote).
func TestNodeReleaseResent(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	r := &testserver.ReplyLoser{}
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), Dialer: r.Dial}) // go-redis's default retries
	defer rdb.Close()
	for _, s := range hashlock.Scripts() {
		if err := s.Preload(ctx, rdb); err != nil {
			t.Fatal(err)
		}
	}
	n := hashlock.Node{}
	for _, level := range []string{"c:1", ""} { // with the level named, and without
		key := uniqueKey(t)
		if _, err := n.Acquire(ctx, hashlock.NewServer(rdb), key, hashlock.NodeAcquire{Owner: "o", TTL: 10 * time.Second, Request: "c:1"}); err != nil {
			t.Fatal(err)
		}
		lost := r.Lost()
		r.Arm(redisfn.Release.Carried())
		left, err := n.Release(ctx, hashlock.NewServer(rdb), key, hashlock.NodeRelease{Owner: "o", Request: "c:2", Level: level})
		if r.Lost() == lost {
			t.Fatal("no reply was lost: the fault did not happen")
		}
		if err != nil || left != 0 {
			t.Fatalf("level %q: resent release answered %d, %v; want 0 (released)", level, left, err)
		}
		if ex := rdb.Exists(ctx, n.Keys(key).Lock).Val(); ex != 0 {
			t.Fatalf("level %q: the lock is still there after the release", level)
		}
	}
}
