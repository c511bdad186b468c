package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
)

func TestWaiterWakesOnRelease(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	// b's queue entry is called in every waiterTimeout/3: 30 s puts b's
	// next own attempt 10 s away (the hold's TTL), so an obtain within 2 s
	// of the release can only be the release's wake-up.
	a, b := newClient(t, nil), newClient(t, nil, lock.WithWaiterTimeout(30*time.Second))
	la := mustObtain(t, ctx, a, key, lock.WithTTL(10*time.Second))
	got := make(chan time.Time, 1)
	go func() {
		l, err := b.Obtain(ctx, key)
		got <- time.Now()
		if err != nil {
			t.Error(err)
			return
		}
		l.Release(ctx)
	}()
	waitQueued(t, a, key, 1)
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		// Pub/Sub wakes it in about a round trip; the bound leaves a
		// starved host (load 23 on 2 cores) the room 100 ms did not.
		if d := at.Sub(released); d > 2*time.Second {
			t.Fatalf("waiter obtained %v after the release", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
}

func TestWaiterDeadline(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	key := uniqueKey(t)
	a, b := newClient(t, nil), newClient(t, nil)
	la := mustObtain(t, ctx, a, key)
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := b.Obtain(wctx, key)
	if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Obtain = %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("returned %v after a 200 ms deadline", d)
	}
	// The waiter left the queue.
	if info, err := a.Inspect(ctx, key); err != nil || len(info.Waiters) != 0 {
		t.Fatalf("queue after the deadline: %v, %v", info.Waiters, err)
	}
	la.Release(ctx)
}

func TestRetryPolls(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	key := uniqueKey(t)
	a, b := newClient(t, nil), newClient(t, nil)
	la := mustObtain(t, ctx, a, key)
	attempts := 0
	// Released once b has polled twice: a release after a fixed 100 ms
	// came, on a loaded host, before b's first attempt.
	polled := make(chan struct{})
	var once sync.Once
	released := make(chan struct{})
	go func() {
		defer close(released)
		<-polled
		la.Release(ctx)
	}()
	lb, err := b.Obtain(ctx, key, lock.WithRetry(func(n int) time.Duration {
		attempts = n
		if n >= 2 {
			once.Do(func() { close(polled) })
		}
		return 10 * time.Millisecond
	}))
	once.Do(func() { close(polled) }) // also when Obtain failed first
	<-released
	if err != nil {
		t.Fatal(err)
	}
	if attempts < 2 {
		t.Fatalf("%d retries", attempts)
	}
	lb.Release(ctx)
}

// TestOnePubSubConnection: many waiters on many keys share their client's
// one Pub/Sub connection.
func TestOnePubSubConnection(t *testing.T) {
	srv := testserverRedis(t)
	ctx := ctxTimeout(t, 30*time.Second)
	holder, waiters := newClient(t, srv), newClient(t, srv)
	var leases []lock.Lease
	var keys []string
	for i := range 4 {
		k := fmt.Sprintf("%s-%d", uniqueKey(t), i)
		keys = append(keys, k)
		leases = append(leases, mustObtain(t, ctx, holder, k))
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := waiters.Obtain(ctx, keys[i%len(keys)])
			if err != nil {
				t.Error(err)
				return
			}
			l.Release(ctx)
		}()
	}
	// One waiter per key is queued in Redis; the other four of each key
	// wait in the client's local line behind it.
	for _, k := range keys {
		waitQueued(t, holder, k, 1)
	}
	list, err := srv.Client(t).ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	subs := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " sub=") && !strings.Contains(line, " sub=0 ") {
			subs++
		}
	}
	for _, l := range leases {
		l.Release(ctx)
	}
	wg.Wait()
	// The waiting client has one; the holder never waited and has none.
	if subs != 1 {
		t.Fatalf("%d Pub/Sub connections for 20 waiters of one client:\n%s", subs, list)
	}
}

func TestFairOrder(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	holder := newClient(t, nil, lock.WithFair())
	l := mustObtain(t, ctx, holder, key)
	clients := []*lock.Client{newClient(t, nil, lock.WithFair()), newClient(t, nil, lock.WithFair())}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := clients[i%2].Obtain(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			l.Release(ctx)
		}()
		waitQueued(t, holder, key, i+1)
	}
	// The releaser cannot barge: its next attempt queues behind the others.
	l.Release(ctx)
	if _, err := holder.TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryObtain with a queue: %v, want ErrNotObtained", err)
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("acquisition order %v, want arrival order", order)
		}
	}
}

// TestFairFreeKeyGoesToQueueHead: a fair lock left free while a waiter is
// queued, with no release to hand it over (its hash deleted by hand, so no
// message either), belongs to the queue's live head: a newcomer's attempt
// must not take it (lock/doc.go, WithFair: no barging ahead of the live
// head), and the head takes it at its next call-in. Mutant 09, which lets
// any attempt take a free fair lock, fails here; the chaos checker sees it
// only when a fault frees the key while waiters are queued.
func TestFairFreeKeyGoesToQueueHead(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	holder := newClient(t, nil, lock.WithFair())
	mustObtain(t, ctx, holder, key, lock.WithTTL(10*time.Second))
	// The head calls in every half of its 4 s grant TTL (2 s), far from
	// the newcomer's attempt a few ms after the deletion.
	head := newClient(t, nil, lock.WithFair(), lock.WithWaiterTimeout(30*time.Second))
	got := make(chan error, 1)
	go func() {
		l, err := head.Obtain(ctx, key, lock.WithTTL(4*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitQueued(t, holder, key, 1)
	if err := shared.Client(t).Del(ctx, lock.DefaultPrefix+"{"+key+"}").Err(); err != nil {
		t.Fatal(err)
	}
	newcomer := newClient(t, nil, lock.WithFair())
	if l, err := newcomer.TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("TryObtain of a free fair lock with a live queue head: %v, want ErrNotObtained", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the queue's head: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queue's head did not take the free lock within 10 s")
	}
}

func TestFairSkipsVanishedWaiter(t *testing.T) {
	const bound = 400 * time.Millisecond
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	holder := newClient(t, nil, lock.WithFair(), lock.WithWaiterTimeout(bound))
	l := mustObtain(t, ctx, holder, key)

	// The first waiter's process vanishes: its Redis connection is closed
	// under it, so it cannot even leave the queue.
	rdb := shared.NewClient()
	gone := lock.New(rdb, lock.WithFair(), lock.WithWaiterTimeout(bound))
	goneDone := make(chan error, 1)
	go func() {
		_, err := gone.Obtain(ctx, key)
		goneDone <- err
	}()
	waitQueued(t, holder, key, 1)
	rdb.Close()

	next := newClient(t, nil, lock.WithFair(), lock.WithWaiterTimeout(bound))
	got := make(chan time.Time, 1)
	go func() {
		l, err := next.Obtain(ctx, key)
		got <- time.Now()
		if err != nil {
			t.Error(err)
			return
		}
		l.Release(ctx)
	}()
	waitQueued(t, holder, key, 2)
	released := time.Now()
	l.Release(ctx)
	select {
	case at := <-got:
		if d := at.Sub(released); d > 2*bound+500*time.Millisecond {
			t.Fatalf("next waiter obtained %v after the release, bound %v", d, bound)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the vanished waiter was not skipped")
	}
	if err := <-goneDone; err == nil {
		t.Fatal("the vanished waiter obtained the lock")
	}
	gone.Close()
}
