package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coordkit/coordkit/lock"
)

func ExampleDo() {
	rdb := shared.NewClient() // any redis.UniversalClient
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
	rdb := shared.NewClient()
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
	rdb := shared.NewClient()
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
	rdb := shared.NewClient()
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
	rdb := shared.NewClient()
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
