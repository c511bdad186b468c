package semaphore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/semaphore"
)

// TestWakeOnKeyServer: a waiter for a permit is subscribed on the shard of
// a Ring (which forwards no message between shards) that holds the
// semaphore, where a release publishes its grant. Before the fix it was
// subscribed on the shard its channel's name hashes to, heard nothing,
// and waited for its call-in, a third of its waiter timeout.
func TestWakeOnKeyServer(t *testing.T) {
	a, b := testserver.StartRedis(t), testserver.StartRedis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	defer ring.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const timeout = 60 * time.Second
	holder := semaphore.New(ring, semaphore.WithWaiterTimeout(timeout))
	defer holder.Close()
	waiter := semaphore.New(ring, semaphore.WithWaiterTimeout(timeout))
	defer waiter.Close()
	chShard, err := ring.GetShardClientForKey(semaphore.WakeChannel(waiter))
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for i := 0; name == ""; i++ {
		k := "wake-" + strconv.Itoa(i)
		s, err := ring.GetShardClientForKey("{" + k + "}")
		if err != nil {
			t.Fatal(err)
		}
		if s.Options().Addr != chShard.Options().Addr {
			name = k
		}
	}
	p, err := holder.Acquire(ctx, name, lock.WithTTL(timeout))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		p   *semaphore.Permit
		err error
	}
	got := make(chan result, 1)
	go func() {
		w, err := waiter.Acquire(ctx, name, lock.WithTTL(timeout))
		got <- result{w, err}
	}()
	q := semaphore.DefaultPrefix + "{" + name + "}:q"
	for {
		n, err := ring.LLen(ctx, q).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		select {
		case r := <-got:
			t.Fatalf("Acquire returned before the holder released: %v", r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	released := time.Now()
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		t.Logf("acquired %v after the release", time.Since(released).Round(time.Microsecond))
		if err := r.p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not acquire within 5s of the release: it heard no message")
	}
}
