package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/zklock"
)

type config struct {
	buyers, clients, stock int
	work                   time.Duration
	strategies             []string
	redis, masters, zk     string
	mysql, postgres        string        // DSNs; "" starts a server
	nodeTimeout            time.Duration // Redlock's per-master timeout; 0: redlock.DefaultNodeTimeout
}

type result struct {
	strategy   string
	sold, left int
	oversold   int
	elapsed    time.Duration
	rate       float64 // completed critical sections per second
}

// errSoldOut ends a buyer: the stock it read was zero.
var errSoldOut = errors.New("sold out")

// A strategy runs one purchase: section must run under its protection.
type strategy struct {
	name string
	// setup returns one buy function per client and a cleanup.
	setup func(ctx context.Context, e *servers, clients int) ([]buyFunc, func(), error)
	// store returns where the stock is kept; nil: the stock's Redis.
	store func(ctx context.Context, e *servers) (stockStore, error)
}

// stockStore keeps the stock that a strategy sells.
type stockStore interface {
	// set makes the stock n.
	set(ctx context.Context, n int) error
	// left returns the stock.
	left(ctx context.Context) (int, error)
	// section returns the critical section of client i of n: read the
	// stock, return errSoldOut if it is zero, work, write it one lower
	// and call sold.
	sections(n int, work time.Duration, sold func()) ([]func(ctx context.Context) error, error)
}

// buyFunc makes one purchase attempt; it returns errSoldOut when the stock it
// saw was zero. Strategies that protect the read-check-write run p.section,
// which records the sale; the others record a sale with p.sold.
type buyFunc func(ctx context.Context, p purchase) error

type purchase struct {
	section func(ctx context.Context) error
	sold    func()
}

var allStrategies = []string{"none", "lock", "redlock", "zklock", "optimistic", "lua",
	"mysql:session", "mysql:lease", "mysql:update", "mysql:forupdate", "mysql:version",
	"pg:session", "pg:lease", "pg:update", "pg:forupdate", "pg:version"}

var strategies = map[string]strategy{}

func addStrategy(s strategy) { strategies[s.name] = s }

const stockKey = "tickets:{demo}:stock"

// redlockMasters is the number of Redlock masters started when -masters is not given.
const redlockMasters = 3

// servers holds what the run uses, started on demand.
type servers struct {
	cfg       config
	closers   []func()
	rdb       redis.UniversalClient // the stock's Redis
	redisAt   string
	mastersAt []string // the Redlock masters, apart from the stock's Redis
	zkAt      []string
	mysqlAt   string // DSNs of the SQL servers started
	pgAt      string
}

// masterAddrs returns the Redlock masters' addresses, starting
// redlockMasters of them on first use.
func (s *servers) masterAddrs() ([]string, error) {
	if s.cfg.masters != "" {
		var addrs []string
		for _, a := range strings.Split(s.cfg.masters, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		return addrs, nil
	}
	if s.mastersAt == nil {
		ms, err := testserver.NewRedisMasters(redlockMasters)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			s.closers = append(s.closers, m.Close)
			s.mastersAt = append(s.mastersAt, m.Addr())
		}
	}
	return s.mastersAt, nil
}

// newMasters returns new clients of the Redlock masters (one set per
// simulated process). They enforce ctx deadlines, as redlock.New requires.
func (s *servers) newMasters() ([]redis.UniversalClient, error) {
	addrs, err := s.masterAddrs()
	if err != nil {
		return nil, err
	}
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		s.closers = append(s.closers, func() { c.Close() })
		cs[i] = c
	}
	return cs, nil
}

// zkServers returns the ZooKeeper servers, starting one on first use.
func (s *servers) zkServers() ([]string, error) {
	if s.cfg.zk != "" {
		return strings.Split(s.cfg.zk, ","), nil
	}
	if s.zkAt == nil {
		z, err := testserver.NewZooKeeper()
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, z.Close)
		s.zkAt = z.Servers()
	}
	return s.zkAt, nil
}

func (s *servers) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

func (s *servers) redisAddr() (string, error) {
	if s.cfg.redis != "" {
		return s.cfg.redis, nil
	}
	if s.redisAt == "" {
		r, err := testserver.NewRedis()
		if err != nil {
			return "", err
		}
		s.closers = append(s.closers, r.Close)
		s.redisAt = r.Addr()
	}
	return s.redisAt, nil
}

// newRedis returns a new client of the stock's Redis (one per simulated process).
func (s *servers) newRedis() (redis.UniversalClient, error) {
	a, err := s.redisAddr()
	if err != nil {
		return nil, err
	}
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{a}})
	s.closers = append(s.closers, func() { c.Close() })
	return c, nil
}

func run(ctx context.Context, c config) ([]result, error) {
	if c.buyers < 1 || c.clients < 1 || c.stock < 1 {
		return nil, fmt.Errorf("buyers, clients and stock must be positive")
	}
	e := &servers{cfg: c}
	defer e.close()
	var err error
	if e.rdb, err = e.newRedis(); err != nil {
		return nil, err
	}
	var out []result
	var errs []error
	for _, name := range c.strategies {
		name = strings.TrimSpace(name)
		s, ok := strategies[name]
		if !ok {
			return out, fmt.Errorf("unknown strategy %q (one of %s)", name, strings.Join(allStrategies, ", "))
		}
		r, err := runOne(ctx, c, e, s)
		out = append(out, r)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return out, errors.Join(errs...)
}

func runOne(ctx context.Context, c config, e *servers, s strategy) (result, error) {
	res := result{strategy: s.name}
	var st stockStore = redisStore{e}
	if s.store != nil {
		var err error
		if st, err = s.store(ctx, e); err != nil {
			return res, err
		}
	}
	if err := st.set(ctx, c.stock); err != nil {
		return res, err
	}
	buys, cleanup, err := s.setup(ctx, e, c.clients)
	if err != nil {
		return res, err
	}
	defer cleanup()

	var sold, sections atomic.Int64
	// Each simulated process reads the stock through a client of its own.
	secs, err := st.sections(c.clients, c.work, func() { sold.Add(1) })
	if err != nil {
		return res, err
	}

	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, c.buyers)
	for b := range c.buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := b % c.clients
			for ctx.Err() == nil {
				err := buys[i](ctx, purchase{secs[i], func() { sold.Add(1) }})
				sections.Add(1)
				if errors.Is(err, errSoldOut) {
					return
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	left, err := st.left(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	res.sold, res.left = int(sold.Load()), left
	res.oversold = max(res.sold-c.stock, 0)
	res.rate = float64(sections.Load()) / res.elapsed.Seconds()
	return res, errors.Join(errs...)
}

// redisStore keeps the stock in the stock's Redis, at stockKey.
type redisStore struct{ e *servers }

func (r redisStore) set(ctx context.Context, n int) error {
	return r.e.rdb.Set(ctx, stockKey, n, 0).Err()
}

func (r redisStore) left(ctx context.Context) (int, error) { return r.e.rdb.Get(ctx, stockKey).Int() }

func (r redisStore) sections(n int, work time.Duration, sold func()) ([]func(ctx context.Context) error, error) {
	secs := make([]func(ctx context.Context) error, n)
	for i := range secs {
		rdb, err := r.e.newRedis()
		if err != nil {
			return nil, err
		}
		secs[i] = func(ctx context.Context) error {
			v, err := rdb.Get(ctx, stockKey).Int()
			if err != nil {
				return err
			}
			if v <= 0 {
				return errSoldOut
			}
			if work > 0 {
				time.Sleep(work)
			}
			if err := rdb.Set(ctx, stockKey, v-1, 0).Err(); err != nil {
				return err
			}
			sold()
			return nil
		}
	}
	return secs, nil
}

func init() {
	addStrategy(strategy{name: "none", setup: func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
		buys := make([]buyFunc, n)
		for i := range buys {
			buys[i] = func(ctx context.Context, p purchase) error { return p.section(ctx) }
		}
		return buys, func() {}, nil
	}})

	addStrategy(strategy{name: "lock", setup: func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
		buys := make([]buyFunc, n)
		var lockers []*lock.Client
		for i := range buys {
			rdb, err := e.newRedis()
			if err != nil {
				return nil, nil, err
			}
			l := lock.New(rdb)
			lockers = append(lockers, l)
			buys[i] = lockerBuy(l)
		}
		return buys, func() {
			for _, l := range lockers {
				l.Close()
			}
		}, nil
	}})

	addStrategy(strategy{name: "redlock", setup: func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
		buys := make([]buyFunc, n)
		var lockers []*redlock.Client
		cleanup := func() {
			for _, l := range lockers {
				l.Close()
			}
		}
		for i := range buys {
			masters, err := e.newMasters()
			if err != nil {
				cleanup()
				return nil, nil, err
			}
			var opts []redlock.Option
			if e.cfg.nodeTimeout > 0 {
				opts = append(opts, redlock.WithNodeTimeout(e.cfg.nodeTimeout))
			}
			l, err := redlock.New(masters, opts...)
			if err != nil {
				cleanup()
				return nil, nil, err
			}
			lockers = append(lockers, l)
			buys[i] = lockerBuy(l)
		}
		return buys, cleanup, nil
	}})

	addStrategy(strategy{name: "zklock", setup: func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
		addrs, err := e.zkServers()
		if err != nil {
			return nil, nil, err
		}
		buys := make([]buyFunc, n)
		var conns []*zk.Conn
		cleanup := func() {
			for _, c := range conns {
				c.Close()
			}
		}
		for i := range buys {
			conn, _, err := zk.Connect(addrs, 4*time.Second, zk.WithLogInfo(false))
			if err != nil {
				cleanup()
				return nil, nil, err
			}
			conns = append(conns, conn)
			l, err := zklock.New(conn, zklock.WithSessionTimeout(4*time.Second))
			if err != nil {
				cleanup()
				return nil, nil, err
			}
			buys[i] = lockerBuy(l)
		}
		return buys, cleanup, nil
	}})

	addStrategy(strategy{name: "optimistic", setup: func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
		buys := make([]buyFunc, n)
		for i := range buys {
			rdb, err := e.newRedis()
			if err != nil {
				return nil, nil, err
			}
			buys[i] = func(ctx context.Context, p purchase) error {
				// The section as a read-modify-write of one key, retried by
				// WATCH/MULTI/EXEC until no one changed the key in between.
				_, err := lock.Update(ctx, rdb, stockKey, func(old string, exists bool) (string, error) {
					v, err := strconv.Atoi(old)
					if err != nil {
						return "", err
					}
					if v <= 0 {
						return "", errSoldOut
					}
					if e.cfg.work > 0 {
						time.Sleep(e.cfg.work)
					}
					return strconv.Itoa(v - 1), nil
				}, lock.WithAttempts(1000))
				if err == nil {
					p.sold()
				}
				return err
			}
		}
		return buys, func() {}, nil
	}})

	addStrategy(strategy{name: "lua", setup: func(ctx context.Context, e *servers, n int) ([]buyFunc, func(), error) {
		buys := make([]buyFunc, n)
		for i := range buys {
			rdb, err := e.newRedis()
			if err != nil {
				return nil, nil, err
			}
			buys[i] = func(ctx context.Context, p purchase) error {
				ok, err := decrement.Run(ctx, rdb, []string{stockKey}).Int()
				if err != nil {
					return err
				}
				if ok == 0 {
					return errSoldOut
				}
				p.sold()
				return nil
			}
		}
		return buys, func() {}, nil
	}})
}

// decrement sells one ticket if any is left, in one atomic step.
var decrement = redis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1]))
if v and v > 0 then
  redis.call('DECR', KEYS[1])
  return 1
end
return 0`)

// lockerBuy runs the section under lock.Do with any Locker.
func lockerBuy(l lock.Locker) buyFunc {
	return func(ctx context.Context, p purchase) error {
		return lock.Do(ctx, l, "tickets", p.section, lock.WithTTL(10*time.Second))
	}
}
