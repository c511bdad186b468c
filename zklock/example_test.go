package zklock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/zklock"
)

func ExampleClient_Obtain() {
	conn, _, err := zk.Connect(strings.Split(os.Getenv("ZK_SERVERS"), ","), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	locks, err := zklock.New(conn, zklock.WithSessionTimeout(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	ctx := context.Background()
	err = lock.Do(ctx, locks, "invoice:42", func(ctx context.Context) error {
		// Pass the fencing token to the resource the lock protects, and stop
		// when ctx is cancelled: the lease was lost.
		lease, err := locks.Obtain(ctx, "invoice:42") // re-enters: same owner
		if err != nil {
			return err
		}
		defer lease.Release(ctx)
		fmt.Println("holding", lease.Key(), "with a token:", lease.Token() > 0)
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// holding invoice:42 with a token: true
	// done: <nil>
}

func ExampleClient_Read() {
	conn, _, err := zk.Connect(strings.Split(os.Getenv("ZK_SERVERS"), ","), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	locks, err := zklock.New(conn)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	ctx := context.Background()
	a, _ := locks.Read().Obtain(ctx, "catalog")
	b, err := locks.Read().TryObtain(ctx, "catalog")
	fmt.Println("second reader:", err)
	_, err = locks.Write().TryObtain(ctx, "catalog")
	fmt.Println("writer:", err)
	a.Release(ctx)
	b.Release(ctx)
	w, err := locks.Write().TryObtain(ctx, "catalog")
	fmt.Println("writer once readers left:", err)
	w.Release(ctx)
	// Output:
	// second reader: <nil>
	// writer: lock: not obtained
	// writer once readers left: <nil>
}
