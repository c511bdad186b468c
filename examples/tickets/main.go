// Command tickets races N buyers for a stock of tickets kept in Redis, once
// per strategy, and prints what each strategy sold:
//
//	strategy     sold  left  oversold  elapsed  sections/s
//
// Each purchase is a read-check-write critical section: GET the stock, check
// it is positive, do some work, SET it one lower. Without a lock two buyers
// read the same stock and both sell the same ticket (oversold > 0). Every
// locked strategy — the Redis lock (lock.Do), Redlock over three masters,
// the ZooKeeper lock, the WATCH/MULTI/EXEC optimistic helper — sells exactly
// the stock, and so does a single Lua decrement, the right answer when the
// whole critical section is one key.
//
// The mysql:* and pg:* strategies keep the stock in a row of MariaDB/MySQL
// or PostgreSQL and sell it under sqllock's session lock (session) or
// lease table (lease), with one conditional UPDATE (update), in a
// transaction after SELECT ... FOR UPDATE (forupdate), or by a version
// compare-and-set (version): every one sells exactly the stock.
//
// With no -redis (and no -masters / -zk / -mysql / -postgres) it starts the
// servers it needs on loopback in a temporary directory and stops them when
// it ends.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	var c config
	var strategies string
	flag.IntVar(&c.buyers, "buyers", 32, "buyer goroutines")
	flag.IntVar(&c.clients, "clients", 4, "clients the buyers are spread over (as separate processes would be)")
	flag.IntVar(&c.stock, "stock", 200, "tickets in stock")
	flag.DurationVar(&c.work, "work", 200*time.Microsecond, "work done inside each critical section")
	flag.StringVar(&strategies, "strategies", strings.Join(allStrategies, ","), "comma-separated strategies to run")
	flag.StringVar(&c.redis, "redis", "", "Redis address for the stock (default: start one)")
	flag.StringVar(&c.masters, "masters", "", "comma-separated Redlock masters (default: start three)")
	flag.DurationVar(&c.nodeTimeout, "node-timeout", 0, "Redlock's timeout per master round trip (default: redlock.DefaultNodeTimeout, 20ms)")
	flag.StringVar(&c.zk, "zk", "", "comma-separated ZooKeeper servers (default: start one)")
	flag.StringVar(&c.mysql, "mysql", "", "MySQL/MariaDB DSN for the mysql:* strategies (default: start MariaDB)")
	flag.StringVar(&c.postgres, "postgres", "", "PostgreSQL URL for the pg:* strategies (default: start PostgreSQL)")
	flag.Parse()
	c.strategies = strings.Split(strategies, ",")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	results, err := run(ctx, c)
	printTable(os.Stdout, c, results)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tickets:", err)
		os.Exit(1)
	}
}

func printTable(w io.Writer, c config, rs []result) {
	fmt.Fprintf(w, "%d buyers over %d clients, %d tickets, %v of work per section\n\n", c.buyers, c.clients, c.stock, c.work)
	fmt.Fprintf(w, "| %-15s | %5s | %5s | %8s | %9s | %10s |\n", "strategy", "sold", "left", "oversold", "elapsed", "sections/s")
	fmt.Fprintf(w, "|%s|%s|%s|%s|%s|%s|\n", strings.Repeat("-", 17), strings.Repeat("-", 7), strings.Repeat("-", 7),
		strings.Repeat("-", 10), strings.Repeat("-", 11), strings.Repeat("-", 12))
	for _, r := range rs {
		fmt.Fprintf(w, "| %-15s | %5d | %5d | %8d | %9s | %10.0f |\n", r.strategy, r.sold, r.left, r.oversold,
			r.elapsed.Round(time.Millisecond), r.rate)
	}
}
