// Command workerid is a service that leases its Snowflake worker ID at
// start-up, issues IDs, and gives the ID back on SIGTERM or SIGINT.
//
//	workerid -service orders -backend redis -redis 127.0.0.1:6379
//	workerid -service orders -backend zk -zk 127.0.0.1:2181
//
// Started several times at once, every instance gets a distinct worker ID
// (the lowest free one). It prints one line when it has its lease
// ("leased worker 3 of orders"), then one ID per -every, and "released
// worker 3" when it exits. If the lease is lost (Redis unreachable for a
// TTL, ZooKeeper session expired) it stops issuing and exits with status 3.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
)

type config struct {
	service string
	backend string
	redis   string
	zk      string
	layout  string
	every   time.Duration
	count   int
}

func main() {
	var c config
	flag.StringVar(&c.service, "service", "demo", "service name the worker ID is leased for")
	flag.StringVar(&c.backend, "backend", "zk", "lease backend: zk or redis")
	flag.StringVar(&c.redis, "redis", "127.0.0.1:6379", "Redis address (backend redis)")
	flag.StringVar(&c.zk, "zk", "127.0.0.1:2181", "comma-separated ZooKeeper servers (backend zk)")
	flag.StringVar(&c.layout, "layout", "twitter", "Snowflake layout preset")
	flag.DurationVar(&c.every, "every", time.Second, "interval between printed IDs")
	flag.IntVar(&c.count, "count", 0, "exit after printing this many IDs (0: run until SIGTERM)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "workerid:", err)
		if errors.Is(err, idgen.ErrLeaseLost) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, out io.Writer) error {
	layout, err := presetByName(c.layout)
	if err != nil {
		return err
	}
	var l workerid.Leaser // what both backends offer
	switch c.backend {
	case "redis":
		rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(c.redis, ",")})
		defer rdb.Close()
		if l, err = workerid.NewRedis(rdb); err != nil {
			return err
		}
	case "zk":
		conn, _, err := zk.Connect(strings.Split(c.zk, ","), 10*time.Second, zk.WithLogInfo(false))
		if err != nil {
			return err
		}
		defer conn.Close()
		if l, err = workerid.NewZK(conn); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown backend %q (want zk or redis)", c.backend)
	}
	defer l.Close()

	lease, err := l.Lease(ctx, c.service)
	if err != nil {
		return stopped(ctx, err)
	}
	fmt.Fprintf(out, "leased worker %d of %s\n", lease.ID(), c.service)
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lease.Release(rctx); err == nil {
			fmt.Fprintf(out, "released worker %d\n", lease.ID())
		}
	}()
	sf, err := lease.NewSnowflake(ctx, layout)
	if err != nil {
		return stopped(ctx, err) // the deferred Release gives the ID back
	}
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	for n := 0; c.count == 0 || n < c.count; n++ {
		id, err := sf.Next()
		if err != nil {
			return err
		}
		p := layout.Decompose(id)
		fmt.Fprintf(out, "id %d worker %d time %s\n", id, p.Worker, p.Time.UTC().Format(time.RFC3339Nano))
		select {
		case <-ctx.Done():
			return nil
		case <-lease.Lost():
			return fmt.Errorf("%w: %v", idgen.ErrLeaseLost, lease.Err())
		case <-tick.C:
		}
	}
	return nil
}

func presetByName(name string) (idgen.Layout, error) {
	var names []string
	for _, l := range idgen.Presets() {
		if l.Name == name {
			return l, nil
		}
		names = append(names, l.Name)
	}
	return idgen.Layout{}, fmt.Errorf("unknown layout %q (one of %s)", name, strings.Join(names, ", "))
}

// stopped turns the error of a start-up step into nil when ctx has ended
// (SIGTERM or SIGINT during start-up): a requested stop, not a failure.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
