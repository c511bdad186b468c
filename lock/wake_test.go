package lock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// Within this, a waiter was told by a message: a waiter that hears nothing
// calls in only after a third of its waiter timeout (wakeTimeout / 3).
const (
	wakeTimeout = 60 * time.Second
	byMessage   = 5 * time.Second
)

// onCluster starts a 3-master Cluster and returns a client of it and a
// ctx for the test.
func onCluster(t *testing.T) (*testserver.RedisCluster, redis.UniversalClient, context.Context) {
	cl := testserver.StartRedisCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return cl, cl.Client(t), ctx
}

// onRing starts two servers and returns a Ring of them and a ctx for the
// test.
func onRing(t *testing.T) (*redis.Ring, context.Context) {
	a, b := testserver.StartRedis(t), testserver.StartRedis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { ring.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ring, ctx
}

// TestWakeOnKeyServer: a waiter is subscribed on the server that holds its
// key, where the release publishes its grant. On a Ring, whose shards
// forward no message, a waiter subscribed elsewhere heard nothing and
// waited for its call-in (it failed so before the fix). On a Cluster the
// message reached it over the cluster bus, up to 40 ms late now and then;
// the test checks that the waiter's channel is subscribed on the key's
// master itself (PUBSUB NUMSUB is node-local on a Cluster).
func TestWakeOnKeyServer(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		cl, rdb, ctx := onCluster(t)
		waiter := lock.New(rdb, lock.WithWaiterTimeout(wakeTimeout))
		defer waiter.Close()
		ch := lock.WakeChannel(waiter)
		chNode, err := cl.NodeFor(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		// A key on another master than the one the channel's name
		// hashes to (where a Cluster client subscribes by default), then
		// a second key on a third master: one subscription on each.
		var keys []string
		used := map[string]bool{chNode.Addr(): true}
		for i := 0; len(keys) < 2; i++ {
			k := "wake-" + strconv.Itoa(i)
			n, err := cl.NodeFor(ctx, "{"+k+"}")
			if err != nil {
				t.Fatal(err)
			}
			if !used[n.Addr()] {
				used[n.Addr()] = true
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			n, _ := cl.NodeFor(ctx, "{"+k+"}")
			handOverLock(t, ctx, rdb, waiter, k, func() {
				subs, err := n.Client(t).PubSubNumSub(ctx, ch).Result()
				if err != nil || subs[ch] != 1 {
					t.Errorf("key %s: the waiter's channel has %d subscribers on the key's master %s (%v), want 1", k, subs[ch], n.Addr(), err)
				}
			})
		}
	})
	t.Run("ring", func(t *testing.T) {
		ring, ctx := onRing(t)
		waiter := lock.New(ring, lock.WithWaiterTimeout(wakeTimeout))
		defer waiter.Close()
		chShard, err := ring.GetShardClientForKey(lock.WakeChannel(waiter))
		if err != nil {
			t.Fatal(err)
		}
		// Both shards: the key's and the channel's (the old client's only
		// subscription).
		var other, same string
		for i := 0; other == "" || same == ""; i++ {
			k := "wake-" + strconv.Itoa(i)
			s, err := ring.GetShardClientForKey("{" + k + "}")
			if err != nil {
				t.Fatal(err)
			}
			if s.Options().Addr == chShard.Options().Addr {
				same = k
			} else {
				other = k
			}
		}
		handOverLock(t, ctx, ring, waiter, other, nil)
		handOverLock(t, ctx, ring, waiter, same, nil)
	})
}

// TestRWWakeOnKeyServer: the RW lock's waiters listen to each key's
// channel on the server that holds the key. Before the fix an RW had one
// Pub/Sub connection, on a server of go-redis's choosing: on a Ring a
// release on another shard went unheard (the waiter called in after a
// third of its waiter timeout), on a Cluster it crossed the bus.
func TestRWWakeOnKeyServer(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		cl, rdb, ctx := onCluster(t)
		waiter := lock.NewRW(rdb, lock.WithWaiterTimeout(wakeTimeout))
		defer waiter.Close()
		seen := map[string]bool{}
		for i := 0; len(seen) < len(cl.Nodes()); i++ {
			k := "rwwake-" + strconv.Itoa(i)
			n, err := cl.NodeFor(ctx, "{"+k+"}")
			if err != nil {
				t.Fatal(err)
			}
			if seen[n.Addr()] {
				continue
			}
			seen[n.Addr()] = true
			ch := lock.DefaultPrefix + "rw:{" + k + "}:ch"
			handOverRW(t, ctx, rdb, waiter, k, func() {
				subs, err := n.Client(t).PubSubNumSub(ctx, ch).Result()
				if err != nil || subs[ch] != 1 {
					t.Errorf("key %s: %d subscribers to its channel on its master %s (%v), want 1", k, subs[ch], n.Addr(), err)
				}
			})
			// The last waiter gone, the channel is unsubscribed.
			deadline := time.Now().Add(5 * time.Second)
			for {
				subs, err := n.Client(t).PubSubNumSub(ctx, ch).Result()
				if err != nil {
					t.Fatal(err)
				}
				if subs[ch] == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("key %s: its channel still subscribed after the wait", k)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
	t.Run("ring", func(t *testing.T) {
		ring, ctx := onRing(t)
		waiter := lock.NewRW(ring, lock.WithWaiterTimeout(wakeTimeout))
		defer waiter.Close()
		seen := map[string]bool{}
		for i := 0; len(seen) < 2; i++ {
			k := "rwwake-" + strconv.Itoa(i)
			s, err := ring.GetShardClientForKey("{" + k + "}")
			if err != nil {
				t.Fatal(err)
			}
			if !seen[s.Options().Addr] {
				seen[s.Options().Addr] = true
				handOverRW(t, ctx, ring, waiter, k, nil)
			}
		}
	})
}

// handOver has holder obtain key, waiter wait for it, waits until
// waiting(ctx) reports the waiter queued, runs queued (if not nil),
// releases the hold, and checks that the waiter obtained key within
// byMessage.
func handOver(t *testing.T, ctx context.Context, holder, waiter lock.Locker, key string, waiting func(context.Context) (bool, error), queued func()) {
	t.Helper()
	l, err := holder.Obtain(ctx, key, lock.WithTTL(wakeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   lock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		w, err := waiter.Obtain(ctx, key, lock.WithTTL(wakeTimeout))
		got <- result{w, err}
	}()
	for {
		ok, err := waiting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		select {
		case r := <-got:
			t.Fatalf("key %s: Obtain returned before the holder released: %v", key, r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if queued != nil {
		queued()
	}
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("key %s: waiter: %v", key, r.err)
		}
		t.Logf("key %s: obtained %v after the release", key, time.Since(released).Round(time.Microsecond))
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(byMessage):
		t.Fatalf("key %s: the waiter did not obtain the lock within %v of the release: it heard no message", key, byMessage)
	}
}

// queuedIn returns a waiting func for handOver: the waiter is queued once
// the list or sorted set at name holds one entry.
func queuedIn(rdb redis.UniversalClient, name string, sorted bool) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var n int64
		var err error
		if sorted {
			n, err = rdb.ZCard(ctx, name).Result()
		} else {
			n, err = rdb.LLen(ctx, name).Result()
		}
		return n == 1, err
	}
}

// handOverLock runs handOver for two Clients of the hash lock.
func handOverLock(t *testing.T, ctx context.Context, rdb redis.UniversalClient, waiter *lock.Client, key string, queued func()) {
	t.Helper()
	holder := lock.New(rdb)
	defer holder.Close()
	handOver(t, ctx, holder, waiter, key, queuedIn(rdb, lock.DefaultPrefix+"{"+key+"}:q", false), queued)
}

// handOverRW runs handOver for two writers of RW clients.
func handOverRW(t *testing.T, ctx context.Context, rdb redis.UniversalClient, waiter *lock.RW, key string, queued func()) {
	t.Helper()
	holder := lock.NewRW(rdb)
	defer holder.Close()
	handOver(t, ctx, holder.Write(), waiter.Write(), key, queuedIn(rdb, lock.DefaultPrefix+"rw:{"+key+"}:ww", true), queued)
}
