package lock_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
)

// TestHolderMeta: WithHolderMeta's metadata is stored with the hold (fresh,
// re-entered, released), a client without it stores none, and Inspect
// reads it.
func TestHolderMeta(t *testing.T) {
	ctx := lock.WithOwner(ctxTimeout(t, 10*time.Second), "o")
	meta := lock.ProcessMeta("billing")
	if want := "service=billing host="; !strings.HasPrefix(meta, want) || !strings.HasSuffix(meta, " pid="+strconv.Itoa(os.Getpid())) {
		t.Fatalf("ProcessMeta = %q", meta)
	}
	c := newClient(t, nil, lock.WithHolderMeta(meta))
	plain := newClient(t, nil)
	key := uniqueKey(t)

	l := mustObtain(t, ctx, c, key)
	if info := inspect(t, c, key); info.Meta != meta {
		t.Fatalf("Meta after Obtain = %q, want %q", info.Meta, meta)
	}
	inner := mustObtain(t, ctx, c, key)
	if info := inspect(t, c, key); info.Meta != meta || info.Owners["o"] != 2 {
		t.Fatalf("after re-entry: %+v", info)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, c, key); info.Held() || info.Meta != "" {
		t.Fatalf("after release: %+v", info)
	}
	l = mustObtain(t, ctx, plain, key)
	defer l.Release(ctx)
	if info := inspect(t, c, key); info.Meta != "" {
		t.Fatalf("a client without WithHolderMeta stored %q", info.Meta)
	}
}

// TestHolderMetaGrant: a queued waiter's metadata is shown while it waits,
// and goes with the grant a release makes, also when the releasing client
// has no metadata of its own; nothing is left in the waiter-metadata hash.
func TestHolderMetaGrant(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	a := newClient(t, nil) // no metadata
	b := newClient(t, nil, lock.WithHolderMeta("b-service"))
	key := uniqueKey(t)
	la := mustObtain(t, ctx, a, key)

	got := make(chan lock.Lease, 1)
	go func() {
		l, err := b.Obtain(lock.WithOwner(ctx, "b1"), key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, a, key, 1)
	info := inspect(t, a, key)
	if len(info.WaiterMetas) != 1 || info.WaiterMetas[0] != "b-service" {
		t.Fatalf("waiter metadata = %q", info.WaiterMetas)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		t.FailNow()
	}
	defer lb.Release(ctx)
	info = inspect(t, a, key)
	if info.Owners["b1"] != 1 || info.Meta != "b-service" {
		t.Fatalf("after the grant: %+v", info)
	}
	metas := "coordkit:lock:{" + key + "}:qtm"
	if n, err := rdb.HLen(ctx, metas).Result(); err != nil || n != 0 {
		t.Fatalf("HLEN %s = %d, %v: a granted waiter's entry was left", metas, n, err)
	}
}

// TestHolderMetaLeave: a waiter that gives up takes its metadata with it,
// and a waiter of a client with metadata that takes a free lock itself
// (woken, not granted) stores it.
func TestHolderMetaLeave(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	a := newClient(t, nil)
	b := newClient(t, nil, lock.WithHolderMeta("b"))
	key := uniqueKey(t)
	la := mustObtain(t, ctx, a, key)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.Obtain(wctx, key)
		done <- err
	}()
	waitQueued(t, a, key, 1)
	cancel()
	if err := <-done; !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Obtain with a cancelled ctx = %v", err)
	}
	metas := "coordkit:lock:{" + key + "}:qtm"
	if n, err := rdb.HLen(ctx, metas).Result(); err != nil || n != 0 {
		t.Fatalf("HLEN %s = %d, %v after the waiter left", metas, n, err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A polling waiter (WithRetry) does not queue outside fair mode: it
	// takes the lock fresh, with its metadata.
	lb := mustObtain(t, ctx, b, key, lock.WithRetry(func(int) time.Duration { return time.Millisecond }))
	defer lb.Release(ctx)
	if info := inspect(t, a, key); info.Meta != "b" {
		t.Fatalf("Meta = %q", info.Meta)
	}
}

// TestHolderMetaHandoff: a release that hands the lock to a local waiter
// of the same client (another owner) stores the client's metadata with the
// new hold.
func TestHolderMetaHandoff(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c := newClient(t, nil, lock.WithHolderMeta("m"))
	key := uniqueKey(t)
	l1 := mustObtain(t, lock.WithOwner(ctx, "o1"), c, key)
	got := make(chan lock.Lease, 1)
	go func() {
		l, err := c.Obtain(lock.WithOwner(ctx, "o2"), key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitInLine(t, c, key, 1) // o2 waits in the client's local line (it does not queue in Redis)
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil {
		t.FailNow()
	}
	defer l2.Release(ctx)
	if info := inspect(t, c, key); info.Owners["o2"] != 1 || info.Meta != "m" {
		t.Fatalf("after the hand-off: %+v", info)
	}
}

// TestHolderMetaCostsNoCommand: with and without metadata, an
// uncontended obtain and release run the same commands in Redis (INFO
// commandstats counts those a script runs) and the same round trips.
func TestHolderMetaCostsNoCommand(t *testing.T) {
	srv := testserverRedis(t)
	admin := srv.Client(t)
	ctx := ctxTimeout(t, 20*time.Second)
	const pairs = 50
	run := func(opts ...lock.ClientOption) int64 {
		c := lock.New(srv.Client(t), opts...)
		defer c.Close()
		key := uniqueKey(t)
		mustObtain(t, ctx, c, key).Release(ctx) // scripts loaded, first-use work done
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for range pairs {
			if err := mustObtain(t, ctx, c, key).Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		s, err := admin.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var calls int64
		for _, line := range strings.Split(s, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
			if !ok || name == "cmdstat_info" || name == "cmdstat_config|resetstat" {
				continue
			}
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			calls += n
		}
		return calls
	}
	without := run()
	with := run(lock.WithHolderMeta(lock.ProcessMeta("svc")))
	if with != without {
		t.Fatalf("%d pairs ran %d commands with metadata, %d without", pairs, with, without)
	}
	t.Logf("%d pairs: %d commands in Redis, with metadata and without", pairs, with)
}

// TestHolderMetaInvalid: metadata above MaxHolderMeta, and metadata on a
// Simple lock (which cannot store it), are refused with ErrInvalid.
func TestHolderMetaInvalid(t *testing.T) {
	rdb := shared.Client(t)
	c := lock.New(rdb, lock.WithHolderMeta(strings.Repeat("x", lock.MaxHolderMeta+1)))
	defer c.Close()
	if err := c.Err(); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Err with oversized metadata = %v", err)
	}
	if _, err := c.TryObtain(context.Background(), uniqueKey(t)); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("TryObtain with oversized metadata = %v", err)
	}
	ok := lock.New(rdb, lock.WithHolderMeta(strings.Repeat("x", lock.MaxHolderMeta)))
	defer ok.Close()
	if err := ok.Err(); err != nil {
		t.Fatalf("metadata of MaxHolderMeta bytes: %v", err)
	}
	s := lock.NewSimple(rdb, lock.WithHolderMeta("m"))
	defer s.Close()
	if err := s.Err(); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("NewSimple with metadata: Err = %v", err)
	}
}

func inspect(t *testing.T, c *lock.Client, key string) lock.Info {
	t.Helper()
	info, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

var _ redis.UniversalClient = (*redis.Client)(nil)

// TestHolderMetaGrantWithoutMeta: a release that grants the lock to the
// waiter of a client without metadata reads no waiter metadata (no HGET in
// INFO commandstats): the hot-key path costs what it did before
// WithHolderMeta existed.
func TestHolderMetaGrantWithoutMeta(t *testing.T) {
	srv := testserverRedis(t)
	admin := srv.Client(t)
	ctx := ctxTimeout(t, 10*time.Second)
	a := newClient(t, srv)
	b := newClient(t, srv)
	key := uniqueKey(t)
	la := mustObtain(t, ctx, a, key)
	got := make(chan lock.Lease, 1)
	go func() {
		l, err := b.Obtain(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, a, key, 1)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		t.FailNow()
	}
	defer lb.Release(ctx)
	s, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, "cmdstat_publish:calls=1,") {
		t.Fatalf("the release did not grant the lock with one message:\n%s", s)
	}
	if strings.Contains(s, "cmdstat_hget:") {
		t.Fatalf("a grant to a client without metadata read the waiter-metadata hash:\n%s", s)
	}
}
