package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coordkit/coordkit/lock"
)

func init() {
	register(command{name: "lock inspect", summary: "show a Redis lock's owners, hold counts, TTL, fencing token and waiters", run: lockInspect})
	register(command{name: "lock release", summary: "force-release a Redis lock (with --force)", run: lockRelease})
}

func lockClient(e *env, c *conn, prefix string) (*lock.Client, func(), error) {
	ctx, cancel := context.WithTimeout(e.ctx, c.timeout)
	defer cancel()
	rdb, err := c.redisClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	lc := lock.New(rdb, lock.WithPrefix(prefix))
	return lc, func() { lc.Close(); rdb.Close() }, nil
}

func lockInspect(e *env, args []string) error {
	fs := newFlags(e, "lock inspect", "KEY", "Shows the state of the Redis lock KEY (as lock.Client.Inspect reads it).")
	var c conn
	c.addRedis(fs, e)
	prefix := fs.String("prefix", lock.DefaultPrefix, "the lock clients' key prefix")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return usagef("want exactly one non-empty KEY")
	}
	lc, closeAll, err := lockClient(e, &c, *prefix)
	if err != nil {
		return err
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(e.ctx, c.timeout)
	defer cancel()
	info, err := lc.Inspect(ctx, pos[0])
	if err != nil {
		return err
	}
	printInfo(e, info)
	return nil
}

func printInfo(e *env, info lock.Info) {
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	state := "free"
	if info.Held() {
		state = "held"
	}
	fmt.Fprintf(tw, "key:\t%s\n", info.Key)
	fmt.Fprintf(tw, "state:\t%s\n", state)
	if info.Held() {
		owners := make([]string, 0, len(info.Owners))
		for o := range info.Owners {
			owners = append(owners, o)
		}
		sort.Strings(owners)
		for _, o := range owners {
			fmt.Fprintf(tw, "owner:\t%s (hold count %d)\n", o, info.Owners[o])
		}
		fmt.Fprintf(tw, "ttl:\t%s\n", info.TTL.Round(time.Second))
	}
	fmt.Fprintf(tw, "fencing token:\t%d\n", info.Token)
	if len(info.Waiters) == 0 {
		fmt.Fprintf(tw, "waiters:\tnone\n")
	}
	for i, w := range info.Waiters {
		fmt.Fprintf(tw, "waiter %d:\t%s\n", i+1, w)
	}
	tw.Flush()
}

func lockRelease(e *env, args []string) error {
	fs := newFlags(e, "lock release", "KEY --force",
		"Deletes the Redis lock KEY whoever holds it and wakes the next waiter. The fencing counter is kept.\n"+
			"The former holder, if still running, loses mutual exclusion: it learns at its next renewal.")
	var c conn
	c.addRedis(fs, e)
	prefix := fs.String("prefix", lock.DefaultPrefix, "the lock clients' key prefix")
	force := fs.Bool("force", false, "required: confirm that the holder may still be running")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return usagef("want exactly one non-empty KEY")
	}
	if !*force {
		return usagef("refusing without --force: the holder, if alive, would lose mutual exclusion")
	}
	lc, closeAll, err := lockClient(e, &c, *prefix)
	if err != nil {
		return err
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(e.ctx, c.timeout)
	defer cancel()
	held, err := lc.ForceRelease(ctx, pos[0])
	if err != nil {
		return err
	}
	if held {
		fmt.Fprintf(e.out, "released %s\n", pos[0])
	} else {
		fmt.Fprintf(e.out, "%s was not held\n", strings.TrimSpace(pos[0]))
	}
	return nil
}
