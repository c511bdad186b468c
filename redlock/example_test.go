package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
)

func ExampleNew() {
	// Five independent masters, with plain clients. (ContextTimeoutEnabled
	// is recommended: a silent master's connection is then freed at the
	// node timeout; the rounds enforce the timeout either way.)
	var clients []*redis.Client
	for _, addr := range strings.Split(os.Getenv("REDLOCK_ADDRS"), ",") {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		clients = append(clients, rdb)
	}
	locker, err := redlock.New(redlock.Masters(clients...))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	fmt.Println("quorum:", locker.Quorum(), "of", locker.N())

	ctx := context.Background()
	err = lock.Do(ctx, locker, "example:report", func(ctx context.Context) error {
		fmt.Println("holding the lock on a majority of masters")
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// quorum: 3 of 5
	// holding the lock on a majority of masters
	// done: <nil>
}

func ExampleClient_TryObtain() {
	var masters []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv("REDLOCK_ADDRS"), ",")[:3] {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		masters = append(masters, rdb)
	}
	// A node timeout for a loaded host (the default, 20 ms, suits a quiet
	// one: redlock's doc): the example runs beside the other tests.
	a, _ := redlock.New(masters, redlock.WithNodeTimeout(250*time.Millisecond))
	defer a.Close()
	b, _ := redlock.New(masters, redlock.WithNodeTimeout(250*time.Millisecond))
	defer b.Close()

	ctx := context.Background()
	first, err := a.TryObtain(ctx, "example:try")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = b.TryObtain(ctx, "example:try")
	fmt.Println("second:", errors.Is(err, lock.ErrNotObtained))
	first.Release(ctx)
	second, err := b.TryObtain(ctx, "example:try")
	if err != nil {
		fmt.Println("after release:", err)
		return
	}
	fmt.Println("after release:", err, second.Token() > first.Token())
	second.Release(ctx)
	// Output:
	// second: true
	// after release: <nil> true
}
