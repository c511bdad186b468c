package lock_test

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

func TestWaitReplicas(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	s := testserver.StartRedisSentinel(t)
	key := uniqueKey(t)
	one := newClient(t, s, lock.WithWaitReplicas(1, time.Second))
	l := mustObtain(t, ctx, one, key)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	two := newClient(t, s, lock.WithWaitReplicas(2, 100*time.Millisecond))
	if _, err := two.Obtain(ctx, key); !errors.Is(err, lock.ErrTooFewReplicas) {
		t.Fatalf("Obtain with 2 replicas required of 1: %v, want ErrTooFewReplicas", err)
	}
	// What was acquired was released again.
	l = mustObtain(t, ctx, newClient(t, s), key)
	l.Release(ctx)
}

type countingMetrics struct {
	lock.NopMetrics
	mu                              sync.Mutex
	waited, held, renewed, lost, nf int
}

func (m *countingMetrics) Waited(_ string, _ time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.nf++
	} else {
		m.waited++
	}
}
func (m *countingMetrics) Held(string, time.Duration) { m.mu.Lock(); m.held++; m.mu.Unlock() }
func (m *countingMetrics) Renewed(string, error)      { m.mu.Lock(); m.renewed++; m.mu.Unlock() }
func (m *countingMetrics) Lost(string, error)         { m.mu.Lock(); m.lost++; m.mu.Unlock() }

func TestMetrics(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	m := &countingMetrics{}
	c := newClient(t, nil, lock.WithMetrics(m))
	key := uniqueKey(t)
	// 1 s TTLs: with 60 ms, a renewal starved under load lets the first
	// lease expire within the 100 ms it must stay held.
	l := mustObtain(t, ctx, c, key, lock.WithTTL(time.Second))
	time.Sleep(100 * time.Millisecond)
	if _, err := newClient(t, nil).TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatal(err)
	}
	l.Release(ctx)
	l = mustObtain(t, ctx, c, key, lock.WithTTL(time.Second))
	shared.Client(t).Del(ctx, lock.DefaultPrefix+"{"+key+"}")
	waitClosed(t, l.Lost(), 3*time.Second, "Lost")
	if _, err := c.TryObtain(ctx, ""); err == nil {
		t.Fatal("empty key accepted")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.waited != 2 || m.held != 1 || m.renewed == 0 || m.lost != 1 {
		t.Fatalf("metrics: %d obtained, %d held, %d renewals, %d lost", m.waited, m.held, m.renewed, m.lost)
	}
}

func TestSimple(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	newSimple := func() *lock.Simple {
		s := lock.NewSimple(shared.Client(t))
		t.Cleanup(func() { s.Close() })
		return s
	}
	t.Run("mutual exclusion", func(t *testing.T) {
		exclusion(t, shared.Client(t), []lock.Locker{newSimple(), newSimple()}, 8, time.Second)
	})
	t.Run("not reentrant, fenced, compare-and-delete", func(t *testing.T) {
		a, b := newSimple(), newSimple()
		key := uniqueKey(t)
		ctx := lock.WithOwner(ctx, "me")
		// 2 s: the second TryObtain must find the first hold there (at
		// 100 ms a stalled test process saw it expire first).
		la := mustObtain(t, ctx, a, key, lock.WithTTL(2*time.Second))
		if _, err := a.TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("second TryObtain by the same owner: %v", err)
		}
		a.Close()
		waitClosed(t, la.Lost(), time.Second, "Lost after Close")
		lb := mustObtain(t, ctx, b, key)
		if lb.Token() <= la.Token() {
			t.Fatalf("token %d not above %d", lb.Token(), la.Token())
		}
		if err := la.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("stale release: %v", err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("watchdog and loss", func(t *testing.T) {
		s := newSimple()
		key := uniqueKey(t)
		// 1.5 s: renewals every 500 ms; at 90 ms (every 30 ms) one
		// renewal late by 60 ms on a loaded host lost the lease, and at
		// 600 ms one starved for 400 ms would (load 23 on 2 cores). The
		// sleep is past the first TTL: the lease outlives it only by
		// renewals.
		l := mustObtain(t, ctx, s, key, lock.WithTTL(1500*time.Millisecond))
		time.Sleep(1800 * time.Millisecond)
		select {
		case <-l.Lost():
			t.Fatal("lost while renewed")
		default:
		}
		shared.Client(t).Del(ctx, lock.DefaultPrefix+"simple:{"+key+"}")
		waitClosed(t, l.Lost(), time.Second, "Lost after DEL")
	})
}

func TestOptimistic(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				_, err := lock.Update(ctx, rdb, key, func(old string, ok bool) (string, error) {
					n, _ := strconv.Atoi(old)
					time.Sleep(50 * time.Microsecond) // widen the race window
					return strconv.Itoa(n + 1), nil
				}, lock.WithAttempts(10000))
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got, _ := rdb.Get(ctx, key).Int(); got != 200 {
		t.Fatalf("counter = %d, want 200", got)
	}
	t.Run("conflict bound", func(t *testing.T) {
		attempts := 0
		err := lock.Optimistic(ctx, rdb, []string{key}, func(tx *redis.Tx) error {
			attempts++
			rdb.Incr(ctx, key) // another client changes the watched key
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, key)
				return nil
			})
			return err
		}, lock.WithAttempts(3))
		if !errors.Is(err, lock.ErrConflict) || attempts != 3 {
			t.Fatalf("Optimistic = %v after %d attempts, want ErrConflict after 3", err, attempts)
		}
	})
}
