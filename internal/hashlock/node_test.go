package hashlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/pipe"
	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/lock"
)

// TestNodeHandoff: every outcome of Node.Handoff on a real server.
func TestNodeHandoff(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	n := hashlock.Node{}
	key := uniqueKey(t)
	k := n.Keys(key)
	acquire := func(owner string, waiter string) hashlock.NodeResult {
		t.Helper()
		r, err := n.Acquire(ctx, hashlock.NewServer(rdb), key, hashlock.NodeAcquire{Owner: owner, TTL: 10 * time.Second, Waiter: waiter})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	handoff := func(from, to string) hashlock.NodeHandoffResult {
		t.Helper()
		r, err := n.Handoff(ctx, hashlock.NewServer(rdb), key, hashlock.NodeHandoff{Owner: from, NewOwner: to, TTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	holder := func() map[string]string { // owners and counts, without the reserved fields
		t.Helper()
		h := rdb.HGetAll(ctx, k.Lock).Val()
		for f := range h {
			if strings.HasPrefix(f, "\x00") {
				delete(h, f)
			}
		}
		return h
	}

	a := acquire("a", "")
	if got := handoff("x", "b"); got.Outcome != hashlock.HandoffNotHeld {
		t.Fatalf("hand-off by a non-holder: %+v", got)
	}
	if h := holder(); h["a"] != "1" || len(h) != 1 {
		t.Fatalf("after a non-holder's hand-off: %v", h)
	}
	got := handoff("a", "b")
	if got.Outcome != hashlock.HandedOver || got.Token <= a.Token {
		t.Fatalf("hand-off a→b: %+v, want HandedOver with a token above %d", got, a.Token)
	}
	if h := holder(); h["b"] != "1" || len(h) != 1 {
		t.Fatalf("after a→b: %v", h)
	}
	if ttl := rdb.PTTL(ctx, k.Lock).Val(); ttl <= 2*time.Second || ttl > 3*time.Second {
		t.Fatalf("b's TTL %v, want the hand-off's 3 s", ttl)
	}

	acquire("b", "") // a second level
	if got := handoff("b", "c"); got.Outcome != hashlock.HandoffReentered {
		t.Fatalf("hand-off of a re-entered hold: %+v", got)
	}
	if h := holder(); h["b"] != "2" {
		t.Fatalf("a refused hand-off changed the hold: %v", h)
	}
	if _, err := n.Release(ctx, hashlock.NewServer(rdb), key, hashlock.NodeRelease{Owner: "b", Request: "r1"}); err != nil {
		t.Fatal(err)
	}

	// A queued waiter of another caller: the hand-off releases instead and
	// wakes that waiter.
	sub := rdb.Subscribe(ctx, n.WakeChannel("w"))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if r := acquire("d", n.WaiterID("w", 1)); r.Held {
		t.Fatal("d acquired a held lock")
	}
	if got := handoff("b", "c"); got.Outcome != hashlock.HandoffReleased {
		t.Fatalf("hand-off with a queued waiter: %+v", got)
	}
	if h := holder(); len(h) != 0 {
		t.Fatalf("lock after a hand-off that released: %v", h)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != n.WaiterID("w", 1) {
		t.Fatalf("wake-up: %v, %v", msg, err)
	}

	for _, h := range []hashlock.NodeHandoff{{Owner: "", NewOwner: "b"}, {Owner: "a", NewOwner: ""}, {Owner: "a", NewOwner: "\x00grant"}} {
		if _, err := n.Handoff(ctx, hashlock.NewServer(rdb), key, h); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Handoff(%q → %q): %v, want ErrInvalid", h.Owner, h.NewOwner, err)
		}
	}

	// Corrupted state: a hold count that is not a number is an error.
	rdb.HSet(ctx, k.Lock, "e", "x")
	if _, err := n.Handoff(ctx, hashlock.NewServer(rdb), key, hashlock.NodeHandoff{Owner: "e", NewOwner: "f", TTL: time.Second}); err == nil || errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("hand-off of a corrupted hold: %v, want a script error", err)
	}
}

// TestNodeGo: the asynchronous forms through a pipeliner answer as the
// blocking ones do; bad input is answered at once with ErrInvalid.
func TestNodeGo(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	p := pipe.New(rdb, 1)
	defer p.Close()
	srv := hashlock.AsyncServer{Run: redisfn.NewRunner(rdb, nil), C: p}
	n := hashlock.Node{}
	key := uniqueKey(t)
	acq := make(chan hashlock.NodeResult, 1)
	n.AcquireGo(ctx, srv, key, hashlock.NodeAcquire{Owner: "a", TTL: 5 * time.Second}, func(r hashlock.NodeResult, err error) {
		if err != nil {
			t.Error(err)
		}
		acq <- r
	})
	a := <-acq
	if !a.Held || !a.Fresh {
		t.Fatalf("AcquireGo: %+v", a)
	}
	ho := make(chan hashlock.NodeHandoffResult, 1)
	n.HandoffGo(ctx, srv, key, hashlock.NodeHandoff{Owner: "a", NewOwner: "b", TTL: 5 * time.Second}, func(r hashlock.NodeHandoffResult, err error) {
		if err != nil {
			t.Error(err)
		}
		ho <- r
	})
	if r := <-ho; r.Outcome != hashlock.HandedOver || r.Token <= a.Token {
		t.Fatalf("HandoffGo: %+v", r)
	}
	rel := make(chan int64, 1)
	n.ReleaseGo(ctx, srv, key, hashlock.NodeRelease{Owner: "b", Request: "go1"}, func(left int64, err error) {
		if err != nil {
			t.Error(err)
		}
		rel <- left
	})
	if left := <-rel; left != 0 {
		t.Fatalf("ReleaseGo: %d levels left, want 0", left)
	}
	var invalid error
	n.AcquireGo(ctx, srv, key, hashlock.NodeAcquire{Owner: "\x00x", TTL: time.Second}, func(_ hashlock.NodeResult, err error) { invalid = err })
	if !errors.Is(invalid, lock.ErrInvalid) {
		t.Fatalf("AcquireGo with a NUL owner: %v", invalid)
	}
	invalid = nil
	n.HandoffGo(ctx, srv, key, hashlock.NodeHandoff{Owner: "", NewOwner: "b"}, func(_ hashlock.NodeHandoffResult, err error) { invalid = err })
	if !errors.Is(invalid, lock.ErrInvalid) {
		t.Fatalf("HandoffGo without an owner: %v", invalid)
	}
}

// TestNodeReleaseWithoutLevelResent: a Node release that names no level,
// sent twice with one Request, drops one level.
func TestNodeReleaseWithoutLevelResent(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	node, _ := hashlock.NewNode("")
	for range 2 {
		if r, err := node.Acquire(ctx, hashlock.NewServer(rdb), key, hashlock.NodeAcquire{Owner: "o", TTL: 5 * time.Second}); err != nil || !r.Held {
			t.Fatalf("Acquire: %+v %v", r, err)
		}
	}
	rel := hashlock.NodeRelease{Owner: "o", Request: "r1"}
	for range 2 {
		if left, err := node.Release(ctx, hashlock.NewServer(rdb), key, rel); err != nil || left != 1 {
			t.Fatalf("Release (same Request): %d %v, want 1 level left", left, err)
		}
	}
}
