package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestLateAnswerNotReturned: an acquisition whose answer arrives after the
// lease's TTL (held up on the way back; found by the chaos checker with a
// black-holed client) is a hold Redis may have expired and given to
// another owner by then. Obtain must not return it: it returned a lease
// already past its deadline, which Lost reported at once, while another
// client held the lock.
func TestLateAnswerNotReturned(t *testing.T) {
	for _, simple := range []bool{false, true} {
		name := "Client"
		if simple {
			name = "Simple"
		}
		t.Run(name, func(t *testing.T) { testLateAnswer(t, simple) })
	}
}

func testLateAnswer(t *testing.T, simple bool) {
	ctx := ctxTimeout(t, 30*time.Second)
	srv := testserverRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // default options: 3 s read timeout
	t.Cleanup(func() { rdb.Close() })
	var late, other lock.Locker
	if simple {
		s := lock.NewSimple(rdb)
		t.Cleanup(func() { s.Close() })
		o := lock.NewSimple(srv.Client(t))
		t.Cleanup(func() { o.Close() })
		late, other = s, o
	} else {
		c := lock.New(rdb)
		t.Cleanup(func() { c.Close() })
		late, other = c, newClient(t, srv)
	}
	key := uniqueKey(t)
	const ttl = 300 * time.Millisecond

	warm := mustObtain(t, ctx, late, key+":warm") // the scripts loaded, a connection open
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.SetBlackholeToClient(true) // Redis runs the script; its answer is held up
	type result struct {
		l   lock.Lease
		at  time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := late.Obtain(ctx, key, lock.WithTTL(ttl))
		done <- result{l, time.Now(), err}
	}()
	time.Sleep(ttl + 200*time.Millisecond) // the hold expires in Redis
	held := mustObtain(t, ctx, other, key, lock.WithTTL(10*time.Second))
	proxy.SetBlackholeToClient(false) // the late answer arrives
	select {
	case r := <-done:
		if r.err == nil {
			lost := "not lost"
			select {
			case <-r.l.Lost():
				lost = "already lost"
			default:
			}
			t.Fatalf("Obtain returned a lease (token %d, %s) while another client held the lock (token %d)", r.l.Token(), lost, held.Token())
		}
		t.Fatalf("Obtain: %v", r.err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Release(context.Background())
	select {
	case <-r.l.Lost():
		t.Fatal("the lease Obtain returned is lost")
	default:
	}
	if r.l.Token() <= held.Token() {
		t.Fatalf("token %d, want above the other holder's %d", r.l.Token(), held.Token())
	}
}

// TestTTLBelowRoundTrip: when every answer comes after the TTL (a TTL
// shorter than the round trip), Obtain gives up after a few tries with
// ErrNotObtained instead of returning dead leases or trying for ever.
func TestTTLBelowRoundTrip(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	srv := testserverRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c := lock.New(rdb)
	t.Cleanup(func() { c.Close() })
	s := lock.NewSimple(rdb)
	t.Cleanup(func() { s.Close() })
	for _, l := range []lock.Locker{c, s} {
		warm := mustObtain(t, ctx, l, uniqueKey(t)) // scripts loaded
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	proxy.SetLatency(40 * time.Millisecond) // 80 ms round trips
	for _, l := range []lock.Locker{c, s} {
		lease, err := l.Obtain(ctx, uniqueKey(t), lock.WithTTL(30*time.Millisecond))
		if err == nil {
			t.Fatalf("%T: Obtain returned a lease (token %d) though every answer came after the 30 ms TTL", l, lease.Token())
		}
		if !errors.Is(err, lock.ErrNotObtained) || ctx.Err() != nil {
			t.Fatalf("%T: Obtain: %v, want ErrNotObtained before the test's deadline", l, err)
		}
	}
}
