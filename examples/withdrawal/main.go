// Command withdrawal runs the mutually exclusive withdrawal flow: several
// service instances take withdrawal requests for a few users; per user one
// withdrawal runs at a time across all instances (the ZooKeeper lock by
// default, the Redis lock with -lock redis); every applied withdrawal gets a
// 32-character serial from idgen, recorded under a uniqueness constraint
// (SET NX; a duplicate is retried with a fresh serial); and every request
// carries an idempotency key, so a request retried after a timeout is
// answered with its first outcome instead of being applied twice.
//
// It prints the balances and checks that no balance went negative, that
// the withdrawals applied add up to what left each balance, that no
// idempotency key was applied twice and that every serial is unique.
//
// With no -redis / -zk it starts the servers it needs on loopback in a
// temporary directory and stops them when it ends.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	var c config
	flag.IntVar(&c.instances, "instances", 3, "service instances (each with its own connections and serial worker)")
	flag.IntVar(&c.users, "users", 4, "users")
	flag.IntVar(&c.requests, "requests", 400, "withdrawal requests")
	flag.Float64Var(&c.retries, "retries", 0.2, "share of requests sent a second time (a client retry after a timeout)")
	flag.Int64Var(&c.balance, "balance", 10000, "each user's opening balance, in cents")
	flag.StringVar(&c.lock, "lock", "zk", "per-user lock: zk or redis")
	flag.StringVar(&c.redis, "redis", "", "Redis address (default: start one)")
	flag.StringVar(&c.zk, "zk", "", "comma-separated ZooKeeper servers (default: start one)")
	flag.Int64Var(&c.seed, "seed", 1, "seed of the request mix")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := run(ctx, c)
	if rep != nil {
		rep.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "withdrawal:", err)
		os.Exit(1)
	}
	if !rep.passed() {
		os.Exit(1)
	}
}
