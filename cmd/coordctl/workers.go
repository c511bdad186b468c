package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/coordkit/coordkit/idgen/workerid"
)

func init() {
	register(command{name: "workers list", summary: "list the leased worker IDs of a service", run: workersList})
}

func workersList(e *env, args []string) error {
	fs := newFlags(e, "workers list", "SERVICE", "Lists who holds each leased worker ID of SERVICE.")
	var c conn
	backend := fs.String("backend", "redis", "where the leases are: redis or zk")
	c.addRedis(fs, e)
	c.addZK(fs, e)
	max := fs.Int64("max", 1023, "the highest worker ID the service leases")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one SERVICE, got %d arguments", len(pos))
	}
	ctx, cancel := context.WithTimeout(e.ctx, c.timeout+5*time.Second)
	defer cancel()
	var l workerid.Leaser
	switch *backend {
	case "redis":
		rdb, err := c.redisClient(ctx)
		if err != nil {
			return err
		}
		defer rdb.Close()
		if l, err = workerid.NewRedis(rdb, workerid.WithMax(*max)); err != nil {
			return usagef("%v", err)
		}
	case "zk":
		zc, err := c.zkConn(ctx)
		if err != nil {
			return err
		}
		defer zc.Close()
		if l, err = workerid.NewZK(zc, workerid.WithMax(*max)); err != nil {
			return usagef("%v", err)
		}
	default:
		return usagef("unknown --backend %q: want redis or zk", *backend)
	}
	defer l.Close()
	holders, err := l.List(ctx, pos[0])
	if err != nil {
		return listErr(err)
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tHOST\tPID\tSINCE\tTTL")
	for _, h := range holders {
		ttl := "-"
		if h.TTL > 0 {
			ttl = h.TTL.Round(time.Millisecond).String()
		}
		since := "-"
		if !h.Since.IsZero() {
			since = h.Since.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", h.ID, h.Host, h.PID, since, ttl)
	}
	tw.Flush()
	if len(holders) == 0 {
		fmt.Fprintf(e.out, "(no worker ID of %s is leased)\n", pos[0])
	}
	return nil
}

// listErr makes a bad service name a usage error.
func listErr(err error) error {
	if errors.Is(err, workerid.ErrInvalid) {
		return usagef("%v", err)
	}
	return err
}
