package etcdworker_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coordkit/coordkit/etcd/etcdworker"
	"github.com/coordkit/coordkit/idgen"
)

func ExampleLeaser_Lease() {
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
	leaser, err := etcdworker.New(cli, etcdworker.WithPrefix("/example/workers"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer leaser.Close()

	ctx := context.Background()
	lease, err := leaser.Lease(ctx, "orders") // the lowest free worker ID
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx) // stores the final mark, then frees the ID
	ids, err := lease.NewSnowflake(ctx, idgen.LayoutTwitter)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, err := ids.Next()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("worker", lease.ID(), "issued", idgen.LayoutTwitter.Decompose(id).Worker == lease.ID())
	// Output:
	// worker 0 issued true
}
