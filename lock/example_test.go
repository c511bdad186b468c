package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
)

func ExampleDo() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // any redis.UniversalClient
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	ctx := context.Background()
	err := lock.Do(ctx, locker, "example:do", func(ctx context.Context) error {
		// ctx is cancelled with cause lock.ErrLockLost if the lease is lost.
		fmt.Println("in the critical section")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// in the critical section
	// err: <nil>
}

func ExampleClient_Obtain() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()
	ctx := context.Background()

	lease, err := locker.Obtain(ctx, "example:obtain", lock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	// Another owner cannot take it meanwhile.
	_, err = locker.TryObtain(ctx, "example:obtain")
	fmt.Println("second owner:", errors.Is(err, lock.ErrNotObtained))
	// Pass lease.Token() to the resource so that it can refuse stale holders.
	fmt.Println("token issued:", lease.Token() > 0)
	fmt.Println("release:", lease.Release(ctx))
	fmt.Println("release again:", lease.Release(ctx))
	// Output:
	// second owner: true
	// token issued: true
	// release: <nil>
	// release again: lock: not held
}

func ExampleWithOwner() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	// The owner travels in the ctx (e.g. from a request header), so a second
	// Obtain by the same owner re-enters instead of deadlocking.
	ctx := lock.WithOwner(context.Background(), "order-service/request-42")
	outer, _ := locker.Obtain(ctx, "example:owner")
	inner, _ := locker.Obtain(ctx, "example:owner")
	fmt.Println("same token:", outer.Token() == inner.Token())

	info, _ := locker.Inspect(ctx, "example:owner")
	fmt.Println("hold count:", info.Owners["order-service/request-42"])
	inner.Release(ctx)
	outer.Release(ctx)
	info, _ = locker.Inspect(ctx, "example:owner")
	fmt.Println("held after the outermost release:", info.Held())
	// Output:
	// same token: true
	// hold count: 2
	// held after the outermost release: false
}

func ExampleUpdate() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	ctx := context.Background()
	rdb.Set(ctx, "example:stock", "10", 0)

	// A read-modify-write that needs no lock: retried if someone else
	// changed the key between the read and the write.
	left, err := lock.Update(ctx, rdb, "example:stock", func(old string, exists bool) (string, error) {
		n, _ := strconv.Atoi(old)
		if n == 0 {
			return "", errors.New("sold out")
		}
		return strconv.Itoa(n - 1), nil
	})
	fmt.Println(left, err)
	// Output: 9 <nil>
}

func ExampleNewSimple() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locker := lock.NewSimple(rdb) // SET NX PX + compare-and-delete
	defer locker.Close()

	err := lock.Do(context.Background(), locker, "example:simple", func(ctx context.Context) error {
		fmt.Println("held")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// held
	// err: <nil>
}

// A fencing token orders the holders of a lock: the protected resource
// remembers the largest token it accepted and refuses writes with a smaller
// one, so a holder that lost the lock (paused past its TTL, cut off) cannot
// overwrite what the next holder wrote.
func ExampleLease_Token() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()
	ctx := context.Background()

	// The resource: accepts a write only with a token above the last one.
	var last int64
	write := func(token int64) error {
		if token <= last {
			return fmt.Errorf("stale token %d (last %d)", token, last)
		}
		last = token
		return nil
	}

	first, _ := locker.Obtain(ctx, "example:fenced")
	firstToken := first.Token()
	first.Release(ctx)
	second, _ := locker.Obtain(ctx, "example:fenced")
	defer second.Release(ctx)

	fmt.Println("second holder writes:", write(second.Token()))
	fmt.Println("first holder, too late:", write(firstToken) != nil)
	// Output:
	// second holder writes: <nil>
	// first holder, too late: true
}

// WithFair serves waiters in the order they queued, across processes:
// a releasing holder grants the lock to the first live waiter in Redis.
func ExampleWithFair() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locker := lock.New(rdb, lock.WithFair())
	defer locker.Close()
	ctx := context.Background()

	holder, _ := locker.Obtain(ctx, "example:fair")
	order := make(chan int, 3)
	for i := 1; i <= 3; i++ {
		go func() {
			l, err := locker.Obtain(ctx, "example:fair")
			if err != nil {
				return
			}
			order <- i
			l.Release(ctx)
		}()
		// Let waiter i queue before i+1 starts (Inspect lists the queue).
		for info, _ := locker.Inspect(ctx, "example:fair"); len(info.Waiters) < i; info, _ = locker.Inspect(ctx, "example:fair") {
			time.Sleep(time.Millisecond)
		}
	}
	holder.Release(ctx)
	fmt.Println(<-order, <-order, <-order)
	// Output: 1 2 3
}

// WithMaxHold bounds how long the watchdog keeps a lease alive: past it the
// lease expires (Lost closes, Do's ctx is cancelled), so a stuck critical
// section cannot hold a lock for ever.
func ExampleWithMaxHold() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	err := lock.Do(context.Background(), locker, "example:maxhold", func(ctx context.Context) error {
		<-ctx.Done() // a section that never ends on its own
		return ctx.Err()
	}, lock.WithTTL(3*time.Second), lock.WithMaxHold(time.Second)) // MaxHold well within the TTL: no renewal starved under load can expire it first
	fmt.Println("lost:", errors.Is(err, lock.ErrLockLost))
	fmt.Println("max hold reached:", strings.Contains(err.Error(), "maximum hold time"))
	// Output:
	// lost: true
	// max hold reached: true
}

// lockCounts counts obtained and lost leases; embedding lock.NopMetrics
// leaves the other hooks empty (and keeps it compiling when hooks are
// added).
type lockCounts struct {
	lock.NopMetrics
	obtained, lost atomic.Int64
}

func (m *lockCounts) Waited(_ string, _ time.Duration, err error) {
	if err == nil {
		m.obtained.Add(1)
	}
}
func (m *lockCounts) Lost(string, error) { m.lost.Add(1) }

func ExampleWithMetrics() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	m := &lockCounts{}
	locker := lock.New(rdb, lock.WithMetrics(m))
	defer locker.Close()
	ctx := context.Background()

	for range 3 {
		l, _ := locker.Obtain(ctx, "example:metrics")
		l.Release(ctx)
	}
	fmt.Println("obtained:", m.obtained.Load(), "lost:", m.lost.Load())
	// Output: obtained: 3 lost: 0
}

// WithLogger routes what the client does in the background (a renewal that
// failed, a lease lost) to a logger of the program's; nothing is logged on
// the hot path.
func ExampleWithLogger() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "owner" || a.Key == "token" {
				return slog.Attr{} // left out so that the output below is stable
			}
			return a
		},
	}))
	locker := lock.New(rdb, lock.WithLogger(logger))
	defer locker.Close()
	ctx := context.Background()

	l, _ := locker.Obtain(ctx, "example:logger", lock.WithTTL(time.Second))
	locker.ForceRelease(ctx, "example:logger") // as an operator would
	<-l.Lost()
	// Output:
	// level=WARN msg="lease lost" component=coordkit/lock key=example:logger cause="lock: lease lost: lock: not held: watchdog: lease not held"
}

// A price table that many read and one updates: readers share the read
// side; the writer waits for them, and readers that come while it waits
// wait for it (writer preference).
func ExampleNewRW() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	rw := lock.NewRW(rdb)
	defer rw.Close()
	ctx := context.Background()

	r1, _ := rw.Read().Obtain(ctx, "example:prices")
	r2, err := rw.Read().TryObtain(ctx, "example:prices")
	fmt.Println("second reader:", err)
	_, err = rw.Write().TryObtain(ctx, "example:prices")
	fmt.Println("writer while read:", errors.Is(err, lock.ErrNotObtained))
	r1.Release(ctx)
	r2.Release(ctx)

	err = lock.Do(ctx, rw.Write(), "example:prices", func(ctx context.Context) error {
		fmt.Println("updating the prices")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// second reader: <nil>
	// writer while read: true
	// updating the prices
	// err: <nil>
}
