package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/zklock"
)

type config struct {
	instances, users, requests int
	retries                    float64
	balance                    int64
	lock                       string
	redis, zk                  string
	seed                       int64
}

// Redis keys; one hash tag, so the flow also runs on a Cluster.
const (
	balancesKey = "withdrawal:{bank}:balances" // hash user -> cents
	idemKey     = "withdrawal:{bank}:idem"     // hash idempotency key -> outcome
	ledgerKey   = "withdrawal:{bank}:ledger"   // list of "serial user amount idem"
	serialKey   = "withdrawal:{bank}:serial:"  // + serial: the uniqueness constraint
)

// request is one withdrawal as a client sends it.
type request struct {
	user   string
	amount int64
	idem   string // idempotency key, the same on a retry
}

// outcome is what the service answers: "ok <serial>" or "rejected".
type outcome string

// instance is one service instance.
type instance struct {
	rdb    redis.UniversalClient
	locker lock.Locker
	serial func() (string, error)

	mu         sync.Mutex // protects duplicates
	duplicates int        // serials found taken and replaced
}

// withdraw applies req at most once: under the user's lock it answers a
// known idempotency key with its first outcome, rejects a withdrawal the
// balance cannot cover, and otherwise records a fresh serial (SET NX) and
// applies the withdrawal in one MULTI/EXEC with its ledger entry and its
// idempotency record.
func (in *instance) withdraw(ctx context.Context, req request) (outcome, error) {
	var out outcome
	err := lock.Do(ctx, in.locker, "withdraw:"+req.user, func(ctx context.Context) error {
		prev, err := in.rdb.HGet(ctx, idemKey, req.idem).Result()
		if err == nil {
			out = outcome(prev)
			return nil // a retry: answer with the first outcome
		}
		if !errors.Is(err, redis.Nil) {
			return err
		}
		bal, err := in.rdb.HGet(ctx, balancesKey, req.user).Int64()
		if err != nil {
			return fmt.Errorf("balance of %s: %w", req.user, err)
		}
		if bal < req.amount {
			out = "rejected"
			return in.rdb.HSet(ctx, idemKey, req.idem, string(out)).Err()
		}
		serial, err := in.uniqueSerial(ctx)
		if err != nil {
			return err
		}
		out = outcome("ok " + serial)
		_, err = in.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HIncrBy(ctx, balancesKey, req.user, -req.amount)
			p.RPush(ctx, ledgerKey, fmt.Sprintf("%s %s %d %s", serial, req.user, req.amount, req.idem))
			p.HSet(ctx, idemKey, req.idem, string(out))
			return nil
		})
		return err
	}, lock.WithTTL(5*time.Second))
	return out, err
}

// uniqueSerial takes serials until one is not yet recorded.
func (in *instance) uniqueSerial(ctx context.Context) (string, error) {
	for range 100 {
		s, err := in.serial()
		if err != nil {
			return "", err
		}
		ok, err := in.rdb.SetNX(ctx, serialKey+s, 1, 0).Result()
		if err != nil {
			return "", err
		}
		if ok {
			return s, nil
		}
		in.mu.Lock()
		in.duplicates++
		in.mu.Unlock()
	}
	return "", errors.New("no unique serial in 100 attempts")
}

// report is what a run found.
type report struct {
	cfg                          config
	users                        []string
	opening                      int64
	final, applied               map[string]int64
	requests, sent               int
	nApplied, rejected, replayed int
	duplicates                   int
	negative, mismatched         []string
	doubleApplied, dupSerials    int
	badSerials                   int
	elapsed                      time.Duration
}

// passed reports whether every check held.
func (r *report) passed() bool {
	return len(r.negative) == 0 && len(r.mismatched) == 0 && r.doubleApplied == 0 && r.dupSerials == 0 && r.badSerials == 0
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "%d instances, %d users, %d requests (%d sent with retries), per-user lock: %s, %v\n\n",
		r.cfg.instances, len(r.users), r.requests, r.sent, r.cfg.lock, r.elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "| %-6s | %8s | %9s | %8s |\n", "user", "opening", "withdrawn", "balance")
	fmt.Fprintf(w, "|--------|----------|-----------|----------|\n")
	for _, u := range r.users {
		fmt.Fprintf(w, "| %-6s | %8d | %9d | %8d |\n", u, r.opening, r.applied[u], r.final[u])
	}
	fmt.Fprintf(w, "\napplied %d, rejected (balance too low) %d, retries answered from the idempotency record %d, serial collisions retried %d\n\n",
		r.nApplied, r.rejected, r.replayed, r.duplicates)
	check := func(ok bool, what string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "[%s] %s\n", mark, what)
	}
	check(len(r.negative) == 0, "no balance below zero"+list(r.negative))
	check(len(r.mismatched) == 0, "opening - withdrawn = balance for every user"+list(r.mismatched))
	check(r.doubleApplied == 0, fmt.Sprintf("no idempotency key applied twice (%d found)", r.doubleApplied))
	check(r.dupSerials == 0 && r.badSerials == 0, fmt.Sprintf("every serial unique and 32 digits (%d duplicates, %d malformed)", r.dupSerials, r.badSerials))
}

func list(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return ": " + strings.Join(xs, ", ")
}

// env holds the servers and connections of a run.
type env struct {
	closers []func()
	redisAt string
	zk      []string
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

func (e *env) setup(c config) error {
	e.redisAt = c.redis
	if e.redisAt == "" {
		r, err := testserver.NewRedis()
		if err != nil {
			return err
		}
		e.closers = append(e.closers, r.Close)
		e.redisAt = r.Addr()
	}
	if c.lock == "zk" {
		if c.zk != "" {
			e.zk = strings.Split(c.zk, ",")
		} else {
			z, err := testserver.NewZooKeeper()
			if err != nil {
				return err
			}
			e.closers = append(e.closers, z.Close)
			e.zk = z.Servers()
		}
	}
	return nil
}

func (e *env) newInstance(c config, worker int64) (*instance, error) {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{e.redisAt}})
	e.closers = append(e.closers, func() { rdb.Close() })
	in := &instance{rdb: rdb}
	switch c.lock {
	case "redis":
		l := lock.New(rdb)
		e.closers = append(e.closers, func() { l.Close() })
		in.locker = l
	case "zk":
		conn, _, err := zk.Connect(e.zk, 4*time.Second, zk.WithLogInfo(false))
		if err != nil {
			return nil, err
		}
		e.closers = append(e.closers, conn.Close)
		l, err := zklock.New(conn, zklock.WithSessionTimeout(4*time.Second))
		if err != nil {
			return nil, err
		}
		in.locker = l
	default:
		return nil, fmt.Errorf("unknown -lock %q (want zk or redis)", c.lock)
	}
	s, err := idgen.NewSerial(idgen.SerialFormat{}, worker)
	if err != nil {
		return nil, err
	}
	in.serial = s.Next
	return in, nil
}

// makeRequests builds the request mix: amounts that together exceed each
// balance (so some are rejected), and a share sent twice with the same
// idempotency key, the second copy to another instance.
func makeRequests(c config, users []string) (reqs []request, sends []request) {
	rng := rand.New(rand.NewPCG(uint64(c.seed), 2))
	for i := range c.requests {
		u := users[rng.IntN(len(users))]
		r := request{user: u, amount: 1 + rng.Int64N(2*c.balance*int64(len(users))/int64(c.requests)+1),
			idem: fmt.Sprintf("req-%d", i)}
		reqs = append(reqs, r)
		sends = append(sends, r)
		if rng.Float64() < c.retries {
			sends = append(sends, r)
		}
	}
	rng.Shuffle(len(sends), func(i, j int) { sends[i], sends[j] = sends[j], sends[i] })
	return reqs, sends
}

func run(ctx context.Context, c config) (*report, error) {
	if c.instances < 1 || c.users < 1 || c.requests < 1 || c.balance < 1 || c.retries < 0 || c.retries > 1 {
		return nil, errors.New("instances, users, requests and balance must be positive, retries in [0, 1]")
	}
	var e env
	defer e.close()
	if err := e.setup(c); err != nil {
		return nil, err
	}
	var ins []*instance
	for i := range c.instances {
		in, err := e.newInstance(c, int64(i))
		if err != nil {
			return nil, err
		}
		ins = append(ins, in)
	}
	rdb := ins[0].rdb
	var users []string
	for i := range c.users {
		users = append(users, "u"+strconv.Itoa(i+1))
	}
	if err := rdb.Del(ctx, balancesKey, idemKey, ledgerKey).Err(); err != nil {
		return nil, err
	}
	for _, u := range users {
		rdb.HSet(ctx, balancesKey, u, c.balance)
	}
	reqs, sends := makeRequests(c, users)

	start := time.Now()
	outcomes := make([]outcome, len(sends))
	errs := make([]error, len(sends))
	var wg sync.WaitGroup
	work := make(chan int)
	for w := range 4 * c.instances { // clients sending concurrently
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				outcomes[i], errs[i] = ins[(i+w)%len(ins)].withdraw(ctx, sends[i])
			}
		}()
	}
	for i := range sends {
		work <- i
	}
	close(work)
	wg.Wait()
	rep := &report{cfg: c, users: users, opening: c.balance, requests: len(reqs), sent: len(sends),
		final: map[string]int64{}, applied: map[string]int64{}, elapsed: time.Since(start)}
	if err := errors.Join(errs...); err != nil {
		return rep, err
	}
	for _, in := range ins {
		rep.duplicates += in.duplicates
	}
	return rep, rep.verify(ctx, rdb, sends, outcomes)
}

// verify reads the final state back from Redis and checks it.
func (r *report) verify(ctx context.Context, rdb redis.UniversalClient, sends []request, outcomes []outcome) error {
	first := map[string]outcome{}
	for i, o := range outcomes {
		if prev, seen := first[sends[i].idem]; seen {
			r.replayed++
			if prev != o {
				r.doubleApplied++ // a retry answered differently: applied twice or lost
			}
			continue
		}
		first[sends[i].idem] = o
		if o == "rejected" {
			r.rejected++
		} else {
			r.nApplied++
		}
	}
	for _, u := range r.users {
		b, err := rdb.HGet(ctx, balancesKey, u).Int64()
		if err != nil {
			return err
		}
		r.final[u] = b
		if b < 0 {
			r.negative = append(r.negative, u)
		}
	}
	ledger, err := rdb.LRange(ctx, ledgerKey, 0, -1).Result()
	if err != nil {
		return err
	}
	serials, idems := map[string]bool{}, map[string]bool{}
	for _, line := range ledger {
		var serial, user, idem string
		var amount int64
		if _, err := fmt.Sscanf(line, "%s %s %d %s", &serial, &user, &amount, &idem); err != nil {
			return fmt.Errorf("ledger entry %q: %w", line, err)
		}
		if serials[serial] {
			r.dupSerials++
		}
		if idems[idem] {
			r.doubleApplied++
		}
		if len(serial) != 32 || strings.Trim(serial, "0123456789") != "" {
			r.badSerials++
		}
		serials[serial], idems[idem] = true, true
		r.applied[user] += amount
	}
	for _, u := range r.users {
		if r.opening-r.applied[u] != r.final[u] {
			r.mismatched = append(r.mismatched, u)
		}
	}
	if len(ledger) != r.nApplied {
		r.mismatched = append(r.mismatched, fmt.Sprintf("ledger has %d entries for %d applied", len(ledger), r.nApplied))
	}
	return nil
}
