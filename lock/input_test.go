package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
)

func TestBadInput(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	good := newClient(t, nil)
	simple := lock.NewSimple(shared.Client(t))
	t.Cleanup(func() { simple.Close() })
	tests := []struct {
		name string
		l    lock.Locker
		key  string
		opts []lock.Option
	}{
		{"nil redis client", lock.New(nil), "k", nil},
		{"nil redis client, simple", lock.NewSimple(nil), "k", nil},
		{"nil *Client", (*lock.Client)(nil), "k", nil},
		{"empty key", good, "", nil},
		{"empty key, simple", simple, "", nil},
		{"zero TTL", good, "k", []lock.Option{lock.WithTTL(0)}},
		{"negative TTL", good, "k", []lock.Option{lock.WithTTL(-time.Second)}},
		{"TTL below the renewal floor", good, "k", []lock.Option{lock.WithTTL(time.Millisecond)}},
		{"TTL below the renewal floor, simple", simple, "k", []lock.Option{lock.WithTTL(time.Millisecond)}},
		{"negative max hold", good, "k", []lock.Option{lock.WithMaxHold(-time.Second)}},
		{"bad client option", lock.New(shared.Client(t), lock.WithDefaultTTL(0)), "k", nil},
		{"brace in prefix", lock.New(shared.Client(t), lock.WithPrefix("a{b")), "k", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, try := range []bool{false, true} {
				obtain := tt.l.Obtain
				if try {
					obtain = tt.l.TryObtain
				}
				l, err := obtain(ctx, tt.key, tt.opts...)
				if !errors.Is(err, lock.ErrInvalid) || l != nil {
					t.Fatalf("got %v, %v; want ErrInvalid", l, err)
				}
			}
		})
	}
	if err := lock.Do(ctx, nil, "k", func(context.Context) error { return nil }); err == nil {
		t.Fatal("Do with a nil Locker succeeded")
	}
}

func TestCorruptedState(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	c := newClient(t, nil)
	tests := []struct {
		name    string
		corrupt func(key, hash string)
	}{
		{"key holds a string", func(key, hash string) { rdb.Set(ctx, hash, "x", 0) }},
		{"key holds a list", func(key, hash string) { rdb.RPush(ctx, hash, "x") }},
		{"hold count is not a number", func(key, hash string) {
			owner := "someone"
			rdb.HSet(ctx, hash, owner, "many")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := uniqueKey(t)
			hash := lock.DefaultPrefix + "{" + key + "}"
			tt.corrupt(key, hash)
			if _, err := c.TryObtain(ctx, key); err == nil || errors.Is(err, lock.ErrNotObtained) && !strings.Contains(tt.name, "number") {
				t.Fatalf("TryObtain on a corrupted key: %v", err)
			}
			if _, err := c.Inspect(ctx, key); err == nil {
				t.Fatal("Inspect of a corrupted key succeeded")
			}
			if _, err := c.Obtain(lock.WithOwner(ctx, "someone"), key); err == nil {
				t.Fatal("re-entry into a corrupted key succeeded")
			}
		})
	}
	t.Run("fencing counter is not a number", func(t *testing.T) {
		key := uniqueKey(t)
		fence := lock.DefaultPrefix + "{" + key + "}:fence"
		rdb.Set(ctx, fence, "abc", 0)
		if _, err := c.TryObtain(ctx, key); err == nil {
			t.Fatal("TryObtain with a corrupted fencing counter succeeded")
		}
		// Nothing written: the counter as it was, no hold.
		if v, err := rdb.Get(ctx, fence).Result(); err != nil || v != "abc" {
			t.Fatalf("counter after the failed obtain: %q %v, want it untouched", v, err)
		}
		if n, _ := rdb.Exists(ctx, lock.DefaultPrefix+"{"+key+"}").Result(); n != 0 {
			t.Fatal("a hold was created beside a corrupted counter")
		}
	})
	t.Run("fencing counter holds a hash", func(t *testing.T) {
		key := uniqueKey(t)
		fence := lock.DefaultPrefix + "{" + key + "}:fence"
		rdb.HSet(ctx, fence, "a", 1)
		if _, err := c.TryObtain(ctx, key); err == nil {
			t.Fatal("TryObtain with a fencing counter of another type succeeded")
		}
		if v, err := rdb.HGet(ctx, fence, "a").Result(); err != nil || v != "1" {
			t.Fatalf("counter after the failed obtain: %q %v, want the hash untouched", v, err)
		}
	})
	t.Run("hold count corrupted while held", func(t *testing.T) {
		key := uniqueKey(t)
		ctx := lock.WithOwner(ctx, "me")
		l := mustObtain(t, ctx, c, key)
		rdb.HSet(ctx, lock.DefaultPrefix+"{"+key+"}", "me", "x")
		if err := l.Release(ctx); err == nil || errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Release of a corrupted count: %v, want a Redis error", err)
		}
		rdb.Del(ctx, lock.DefaultPrefix+"{"+key+"}")
	})
	t.Run("simple lock key holds a hash", func(t *testing.T) {
		key := uniqueKey(t)
		rdb.HSet(ctx, lock.DefaultPrefix+"simple:{"+key+"}", "a", 1)
		s := lock.NewSimple(rdb)
		defer s.Close()
		if _, err := s.TryObtain(ctx, key); err == nil {
			t.Fatal("simple TryObtain on a hash succeeded")
		}
	})
}

func TestBackendFailure(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	srv := testserverRedis(t)
	c := newClient(t, srv)
	srv.Kill()
	_, err := c.TryObtain(ctx, uniqueKey(t))
	if err == nil || errors.Is(err, lock.ErrNotObtained) || errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("TryObtain on a dead server: %v, want the Redis error", err)
	}
}

func TestScriptsLoad(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	for name, s := range lock.Scripts() {
		t.Run(name, func(t *testing.T) {
			sha, err := s.Eval().Load(ctx, rdb).Result()
			if err != nil {
				t.Fatalf("SCRIPT LOAD: %v", err)
			}
			if sha != s.Hash() {
				t.Fatalf("sha %s, want %s", sha, s.Hash())
			}
			ok, err := rdb.ScriptExists(ctx, sha).Result()
			if err != nil || !ok[0] {
				t.Fatalf("SCRIPT EXISTS = %v, %v", ok, err)
			}
		})
	}
	// After SCRIPT FLUSH, EVALSHA fails with NOSCRIPT and Run falls back
	// to EVAL; after FUNCTION FLUSH, FCALL fails with "Function not found"
	// and the Client loads the library again (TestFunctionFlushReloads).
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, nil)
	l := mustObtain(t, ctx, c, uniqueKey(t))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// lossyRelease answers the first release script it forwards with a network
// error, as if the reply had been lost after Redis ran it.
type lossyRelease struct {
	redis.UniversalClient
	sha, fn string // the release's SHA1 and function name
	lose    bool
}

func (r *lossyRelease) FCall(ctx context.Context, fn string, keys []string, args ...any) *redis.Cmd {
	return r.loseIf(ctx, fn == r.fn, r.UniversalClient.FCall(ctx, fn, keys, args...))
}

func (r *lossyRelease) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return r.loseIf(ctx, sha == r.sha, r.UniversalClient.EvalSha(ctx, sha, keys, args...))
}

// loseIf answers cmd, the release's if release, with a network error
// instead, once armed (lose).
func (r *lossyRelease) loseIf(ctx context.Context, release bool, cmd *redis.Cmd) *redis.Cmd {
	if release && r.lose && cmd.Err() == nil {
		r.lose = false
		bad := redis.NewCmd(ctx)
		bad.SetErr(errors.New("read tcp: i/o timeout"))
		return bad
	}
	return cmd
}

func TestReleaseRetryDropsOneLevel(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	release := lock.Scripts()["release.lua"]
	lossy := &lossyRelease{UniversalClient: shared.Client(t), sha: release.Hash(), fn: release.Name()}
	c := lock.New(lossy)
	t.Cleanup(func() { c.Close() })
	key := uniqueKey(t)
	ctx = lock.WithOwner(ctx, lock.NewOwner())
	outer := mustObtain(t, ctx, c, key)
	inner := mustObtain(t, ctx, c, key)
	release.Preload(ctx, shared.Client(t)) // EVALSHA reaches Redis
	lossy.lose = true
	if err := inner.Release(ctx); err == nil {
		t.Fatal("the lost reply did not fail the release")
	}
	if err := inner.Release(ctx); err != nil { // the retry gets the first answer
		t.Fatalf("retried release: %v", err)
	}
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := lock.OwnerFrom(ctx)
	if info.Owners[owner] != 1 {
		t.Fatalf("hold count %v after one retried release of two levels, want 1", info.Owners)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
