package lock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
)

// The string form of a hold (internal/hashlock/lua/compact.lua): a fresh
// hold of one level with nobody waiting is one string key; re-entry, a
// queued waiter, a hand-off or a grant make it the hash it stands for.

// TestCompactHold: a fresh hold is a string that Inspect reads as its
// hash; re-entry turns it into that hash with the same token and TTL; the
// releases free it and leave the counter at token + 1.
func TestCompactHold(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	for _, meta := range []string{"", "service=pay host=h\x00pid=7:"} {
		t.Run("meta="+strconv.Quote(meta), func(t *testing.T) {
			var opts []lock.ClientOption
			if meta != "" {
				opts = append(opts, lock.WithHolderMeta(meta))
			}
			c := newClient(t, nil, opts...)
			key := uniqueKey(t)
			hash := lock.DefaultPrefix + "{" + key + "}"
			owner := "own\x00er:{x}"
			octx := lock.WithOwner(ctx, owner)
			outer := mustObtain(t, octx, c, key, lock.WithTTL(20*time.Second))
			if kind := rdb.Type(ctx, hash).Val(); kind != "string" {
				t.Fatalf("a fresh hold is a %s, want a string", kind)
			}
			info, err := c.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if info.Owners[owner] != 1 || len(info.Owners) != 1 || info.HoldToken != outer.Token() || info.Meta != meta ||
				info.Token != outer.Token() || info.TTL <= 19*time.Second {
				t.Fatalf("Inspect of the string form: %+v, want %q: 1, token %d, meta %q, TTL about 20s", info, owner, outer.Token(), meta)
			}
			rdb.PExpire(ctx, hash, 15*time.Second) // the conversion keeps the TTL the key has
			inner := mustObtain(t, octx, c, key, lock.WithTTL(30*time.Second))
			if inner.Token() != outer.Token() {
				t.Fatalf("re-entry token %d, want the hold's %d", inner.Token(), outer.Token())
			}
			if kind := rdb.Type(ctx, hash).Val(); kind != "hash" {
				t.Fatalf("a re-entered hold is a %s, want a hash", kind)
			}
			info, _ = c.Inspect(ctx, key)
			if info.Owners[owner] != 2 || info.HoldToken != outer.Token() || info.Meta != meta {
				t.Fatalf("Inspect after re-entry: %+v", info)
			}
			if err := inner.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if info, _ = c.Inspect(ctx, key); info.Owners[owner] != 1 {
				t.Fatalf("after the inner release: %+v", info)
			}
			if err := outer.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n := rdb.Exists(ctx, hash).Val(); n != 0 {
				t.Fatal("the lock is still there after both releases")
			}
			if f, _ := rdb.Get(ctx, hash+":fence").Int64(); f != outer.Token()+1 {
				t.Fatalf("counter %d after the outermost release, want token + 1 = %d", f, outer.Token()+1)
			}
			// A resent release of the string hold answers "released".
			if err := outer.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("second Release of the same lease: %v, want ErrNotHeld (the lease is done)", err)
			}
		})
	}
}

// TestCompactHoldConvertedMidTTL: the conversion keeps the key's expiry: a
// waiter that queues behind a string hold whose TTL is nearly over leaves
// it as short-lived as it was.
func TestCompactHoldConvertedMidTTL(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	c := newClient(t, nil)
	key := uniqueKey(t)
	hash := lock.DefaultPrefix + "{" + key + "}"
	l := mustObtain(t, ctx, c, key)
	defer l.Release(ctx)
	rdb.PExpire(ctx, hash, 5*time.Second)
	other := newClient(t, nil)
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := other.Obtain(wctx, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Obtain of a held lock: %v", err)
	}
	if kind := rdb.Type(ctx, hash).Val(); kind != "hash" {
		t.Fatalf("the hold after a waiter queued is a %s, want a hash", kind)
	}
	if ttl := rdb.PTTL(ctx, hash).Val(); ttl > 5*time.Second || ttl < 4*time.Second {
		t.Fatalf("TTL after a waiter queued: %v, want the 5s it had", ttl)
	}
}

// TestCompactHoldWaiter: a waiter that queues behind a string hold turns it
// into the hash with the "waiting" flag, so that the release grants it the
// lock instead of deleting a key nobody looks at.
func TestCompactHoldWaiter(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	a, b := newClient(t, nil), newClient(t, nil)
	key := uniqueKey(t)
	hash := lock.DefaultPrefix + "{" + key + "}"
	first := mustObtain(t, ctx, a, key)
	got := make(chan lock.Lease, 1)
	go func() {
		l, err := b.Obtain(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for info, _ := a.Inspect(ctx, key); len(info.Waiters) == 0; info, _ = a.Inspect(ctx, key) {
		if ctx.Err() != nil {
			t.Fatal("the waiter never queued")
		}
		time.Sleep(time.Millisecond)
	}
	if w, err := rdb.HGet(ctx, hash, "\x00w").Result(); err != nil || w != "1" {
		t.Fatalf("the held lock after a waiter queued: waiting flag %q, %v", w, err)
	}
	released := time.Now()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil {
		return
	}
	if d := time.Since(released); d > time.Second {
		t.Fatalf("the waiter took %v after the release (woken by its timer, not the grant)", d)
	}
	if second.Token() <= first.Token() {
		t.Fatalf("the waiter's token %d, want more than %d", second.Token(), first.Token())
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCompactHoldRenewed: the watchdog renews a string hold, and only the
// hold it was made for.
func TestCompactHoldRenewed(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	c := newClient(t, nil)
	key := uniqueKey(t)
	hash := lock.DefaultPrefix + "{" + key + "}"
	l := mustObtain(t, ctx, c, key, lock.WithTTL(300*time.Millisecond))
	time.Sleep(900 * time.Millisecond)
	if kind := rdb.Type(ctx, hash).Val(); kind != "string" {
		t.Fatalf("the hold is a %s, want a string", kind)
	}
	select {
	case <-l.Lost():
		t.Fatalf("a renewed string hold was lost: %v", lock.LostCause(l))
	default:
	}
	// The same owner's string hold with another token is not this hold.
	v := rdb.Get(ctx, hash).Val()
	tok := strconv.FormatInt(l.Token(), 10)
	if !strings.HasPrefix(v, tok+"\x00") {
		t.Fatalf("string hold %q does not start with the token %s", v, tok)
	}
	rdb.Set(ctx, hash, strconv.FormatInt(l.Token()+7, 10)+strings.TrimPrefix(v, tok), redis.KeepTTL)
	waitClosed(t, l.Lost(), 2*time.Second, "the hold replaced by another with the same owner reported lost")
	if err := lock.LostCause(l); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("LeaseStatus: %v", err)
	}
}

// TestCompactHoldCounterAhead: when the fencing counter is ahead of the
// server's clock (the clock went back), the string hold carries counter +
// 1, the token the lease got, not the clock reading it was written with.
func TestCompactHoldCounterAhead(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	c := newClient(t, nil)
	key := uniqueKey(t)
	hash := lock.DefaultPrefix + "{" + key + "}"
	ahead := time.Now().Add(24 * time.Hour).UnixMicro()
	rdb.Set(ctx, hash+":fence", ahead, 0)
	l := mustObtain(t, ctx, c, key)
	if l.Token() != ahead+1 {
		t.Fatalf("token %d, want counter + 1 = %d", l.Token(), ahead+1)
	}
	if info, _ := c.Inspect(ctx, key); info.HoldToken != ahead+1 || info.Token != ahead+1 {
		t.Fatalf("Inspect: hold token %d, counter %d, want %d both", info.HoldToken, info.Token, ahead+1)
	}
	if ttl := rdb.PTTL(ctx, hash).Val(); ttl < lock.DefaultTTL-time.Second {
		t.Fatalf("TTL %v after the token was corrected, want the hold's", ttl)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if f, _ := rdb.Get(ctx, hash+":fence").Int64(); f != ahead+2 {
		t.Fatalf("counter %d after the release, want %d", f, ahead+2)
	}
}
