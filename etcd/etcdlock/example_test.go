package etcdlock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/lock"
)

func ExampleClient_Obtain() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Getenv("ETCD_ENDPOINTS"), ","),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	locks, err := etcdlock.New(cli, etcdlock.WithTTL(10*time.Second))
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
