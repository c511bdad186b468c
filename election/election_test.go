package election_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/election"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/zklock"
)

var (
	single  *testserver.Redis
	masters []*testserver.Redis
	zkSrv   *testserver.ZooKeeper
	maria   *testserver.MariaDB
	pg      *testserver.Postgres
)

type serverRun struct{ m *testing.M }

func (r serverRun) Run() int {
	var err error
	if single, err = testserver.NewRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer single.Close()
	if masters, err = testserver.NewRedisMasters(3); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		for _, m := range masters {
			m.Close()
		}
	}()
	if zkSrv, err = testserver.NewZooKeeper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer zkSrv.Close()
	if maria, err = testserver.NewMariaDB(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer maria.Close()
	if pg, err = testserver.NewPostgres(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pg.Close()
	if err := createSQLTables(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Setenv("REDIS_ADDR", single.Addr())
	return r.m.Run()
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(serverRun{m},
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// client is a lock client as one instance of a service has it.
type client interface {
	lock.Locker
	Close() error
}

// backend opens a new client of one lock backend, as a separate process
// would (connections of its own), closed when the test ends.
type backend struct {
	name string
	open func(t *testing.T) client
}

func backends() []backend {
	return append([]backend{
		{"lock", func(t *testing.T) client {
			rdb := single.NewClient()
			c := lock.New(rdb)
			t.Cleanup(func() { c.Close(); rdb.Close() })
			return c
		}},
		{"redlock", func(t *testing.T) client {
			var ms []redis.UniversalClient
			for _, m := range masters {
				rdb := m.NewClient()
				t.Cleanup(func() { rdb.Close() })
				ms = append(ms, rdb)
			}
			c, err := redlock.New(ms, redlock.WithNodeTimeout(250*time.Millisecond)) // 20 ms, the default, is for a quiet host
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}},
		{"zklock", func(t *testing.T) client {
			conn := zkSrv.DialT(t, 4*time.Second, nil)
			c, err := zklock.New(conn.Conn, zklock.WithRoot("/election-test"), zklock.WithSessionTimeout(4*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			z := &zkClient{c, conn}
			t.Cleanup(func() { z.Close() })
			return z
		}},
	}, sqlBackends()...)
}

// zkClient is a zklock client with its own session, which its Close ends
// as a process's exit would.
type zkClient struct {
	*zklock.Client
	conn *testserver.ZKConn
}

func (z *zkClient) Close() error {
	err := z.Client.Close()
	z.conn.Close()
	return err
}

var keySeq atomic.Int64

func newKey(t *testing.T) string { return fmt.Sprintf("election-%s-%d", t.Name(), keySeq.Add(1)) }

func newElection(t *testing.T, l lock.Locker, key, id string, opts ...election.Option) *election.Election {
	t.Helper()
	e, err := election.New(l, key, append([]election.Option{election.WithIdentity(id)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestCampaign: one leader at a time; a resign hands over at once; each
// term's token is larger; Leader names the leader on every backend.
func TestCampaign(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			key := newKey(t)
			a := newElection(t, b.open(t), key, "a")
			bb := newElection(t, b.open(t), key, "b")
			if id, _, err := a.Leader(ctx); err != nil || id != "" {
				t.Fatalf("Leader before any campaign = %q, %v", id, err)
			}
			ta, err := a.Campaign(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if id, token, err := bb.Leader(ctx); err != nil || id != "a" || token != ta.Token() {
				t.Fatalf("Leader = %q, %d, %v; want a, %d", id, token, err, ta.Token())
			}
			got := make(chan *election.Term, 1)
			go func() {
				tb, err := bb.Campaign(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- tb
			}()
			select {
			case <-got:
				t.Fatal("b leads while a does")
			case <-time.After(300 * time.Millisecond):
			}
			if err := ta.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(ta.Err(), election.ErrResigned) {
				t.Fatalf("a's term Err = %v, want ErrResigned", ta.Err())
			}
			var tb *election.Term
			select {
			case tb = <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("b does not lead within 5 s of a's resign")
			}
			if tb == nil {
				t.FailNow()
			}
			if tb.Token() <= ta.Token() {
				t.Fatalf("b's token %d not above a's %d", tb.Token(), ta.Token())
			}
			if id, _, err := a.Leader(ctx); err != nil || id != "b" {
				t.Fatalf("Leader = %q, %v; want b", id, err)
			}
			if err := ta.Resign(ctx); !errors.Is(err, election.ErrResigned) {
				t.Fatalf("second Resign: %v", err)
			}
			tb.Resign(ctx)
		})
	}
}

// TestLeaderCrash: the leader's process stops without resigning (its lock
// client closed: no more renewals, the key left to expire); its term ends
// at once, and another instance leads once the lock's lease runs out.
func TestLeaderCrash(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			key := newKey(t)
			la := b.open(t)
			a := newElection(t, la, key, "a", election.WithTTL(time.Second))
			bb := newElection(t, b.open(t), key, "b", election.WithTTL(time.Second))
			ta, err := a.Campaign(ctx)
			if err != nil {
				t.Fatal(err)
			}
			la.Close()
			select {
			case <-ta.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the crashed leader's term did not end")
			}
			if !errors.Is(ta.Err(), lock.ErrLockLost) {
				t.Fatalf("term Err = %v, want lock.ErrLockLost", ta.Err())
			}
			start := time.Now()
			tb, err := bb.Campaign(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("b leads %v after a's crash", time.Since(start).Round(time.Millisecond))
			if tb.Token() <= ta.Token() {
				t.Fatalf("b's token %d not above a's %d", tb.Token(), ta.Token())
			}
			tb.Resign(ctx)
		})
	}
}

// TestRun: three instances run a singleton job; at no moment do two run
// it; each term runs it once, the terms hand over as the job returns, and
// the callbacks see every start, stop and leader.
func TestRun(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			key := newKey(t)
			// The instances run for 4 s and until 5 terms have run under
			// at least 2 leaders, however long a loaded machine takes (4 s
			// alone saw 3 terms of sqllock-postgres-table beside two CPU
			// burners and a test package).
			begin := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var running, overlaps, runs, started, stopped atomic.Int64
			var mu sync.Mutex
			leaders := map[string]bool{}
			lastToken := int64(0)
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for _, id := range []string{"a", "b", "c"} {
				e := newElection(t, b.open(t), key, id,
					election.WithRetryPeriod(50*time.Millisecond), election.WithObservePeriod(50*time.Millisecond),
					election.WithCallbacks(election.Callbacks{
						OnStartedLeading: func(*election.Term) { started.Add(1) },
						OnStoppedLeading: func(*election.Term) { stopped.Add(1) },
						OnNewLeader: func(id string) {
							mu.Lock()
							leaders[id] = true
							mu.Unlock()
						},
					}))
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- e.Run(ctx, func(ctx context.Context, term *election.Term) error {
						if running.Add(1) > 1 {
							overlaps.Add(1)
						}
						defer running.Add(-1)
						mu.Lock()
						if term.Token() <= lastToken {
							t.Errorf("term token %d not above the last %d", term.Token(), lastToken)
						}
						lastToken = term.Token()
						enough := runs.Add(1) >= 5 && realLeaders(leaders) >= 2 && time.Since(begin) >= 4*time.Second
						mu.Unlock()
						if enough {
							cancel() // every Run returns nil
						}
						select { // the job: a short task, then the term is handed on
						case <-time.After(100 * time.Millisecond):
						case <-ctx.Done():
						}
						return nil
					})
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			}
			if overlaps.Load() != 0 {
				t.Fatalf("%d overlapping runs of the job", overlaps.Load())
			}
			if runs.Load() < 5 || started.Load() != runs.Load() || stopped.Load() != runs.Load() {
				t.Fatalf("%d runs, %d started, %d stopped", runs.Load(), started.Load(), stopped.Load())
			}
			mu.Lock()
			defer mu.Unlock()
			if realLeaders(leaders) < 2 {
				t.Fatalf("OnNewLeader saw %v", leaders)
			}
			t.Logf("%d terms in %v; leaders seen %v", runs.Load(), time.Since(begin), leaders)
		})
	}
}

// realLeaders counts the instances in leaders, not "" (no leader).
func realLeaders(leaders map[string]bool) int {
	n := len(leaders)
	if leaders[""] {
		n--
	}
	return n
}

// TestRunStops: a job that fails stops Run with its error; a closed locker
// stops it with lock.ErrClosed.
func TestRunStops(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	l := backends()[0].open(t)
	e := newElection(t, l, newKey(t), "a")
	boom := errors.New("boom")
	if err := e.Run(ctx, func(context.Context, *election.Term) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the job's error", err)
	}
	l.Close()
	if err := e.Run(ctx, func(context.Context, *election.Term) error { return nil }); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Run on a closed locker = %v, want lock.ErrClosed", err)
	}
}

// TestLostTermCancelsRun: the key deleted behind the leader's back ends
// the term; the job's ctx is cancelled with the loss as its cause.
func TestLostTermCancelsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := backends()[0].open(t).(*lock.Client)
	key := newKey(t)
	// 3 s: the next renewal (a second later) finds the hash gone. With
	// 600 ms, a process stalled past the TTL lost the term to expiry
	// (ErrExpired) before any renewal could find it gone.
	e := newElection(t, l, key, "a", election.WithTTL(3*time.Second))
	cause := make(chan error, 1)
	e.Run(ctx, func(jctx context.Context, term *election.Term) error {
		l.ForceRelease(ctx, key)
		<-jctx.Done()
		cause <- context.Cause(jctx)
		cancel()
		return jctx.Err()
	})
	if err := <-cause; !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("job ctx cause = %v, want lock.ErrLockLost and lock.ErrNotHeld", err)
	}
}

func TestBadInput(t *testing.T) {
	l := backends()[0].open(t)
	for name, f := range map[string]func() error{
		"nil locker": func() error { _, err := election.New(nil, "k"); return err },
		"empty key":  func() error { _, err := election.New(l, ""); return err },
		"identity":   func() error { _, err := election.New(l, "k", election.WithIdentity("a#b")); return err },
		"retry":      func() error { _, err := election.New(l, "k", election.WithRetryPeriod(0)); return err },
		"nil fn": func() error {
			e, _ := election.New(l, "k")
			return e.Run(context.Background(), nil)
		},
	} {
		if err := f(); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("%s: %v, want lock.ErrInvalid", name, err)
		}
	}
	rdb := single.NewClient()
	defer rdb.Close()
	s := lock.NewSimple(rdb)
	defer s.Close()
	e, _ := election.New(s, "k")
	if _, _, err := e.Leader(context.Background()); !errors.Is(err, election.ErrNotObservable) {
		t.Errorf("Leader on lock.Simple: %v, want ErrNotObservable", err)
	}
}

// A nightly job that one instance of the service runs: whichever leads
// runs it; if it loses the lead, its ctx is cancelled and another instance
// takes over.
func ExampleElection_Run() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	e, err := election.New(locker, "report-sender", election.WithIdentity("report-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	err = e.Run(ctx, func(ctx context.Context, term *election.Term) error {
		leader, _, _ := e.Leader(ctx)
		fmt.Println("leading:", leader, "with a fencing token:", term.Token() > 0)
		stop() // here: the job runs once; a service would run until ctx ends
		return nil
	})
	fmt.Println("Run:", err)
	// Output:
	// leading: report-1 with a fencing token: true
	// Run: <nil>
}

// TestServerRestart: the Redis server restarts without its data while a
// leader leads: the leader's term ends at its next renewal (the lock is
// gone), and another instance leads, with a larger token.
func TestServerRestart(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := ctxFor(t, 20*time.Second)
	key := newKey(t)
	open := func() lock.Locker {
		rdb := srv.NewClient()
		c := lock.New(rdb)
		t.Cleanup(func() { c.Close(); rdb.Close() })
		return c
	}
	a := newElection(t, open(), key, "a", election.WithTTL(600*time.Millisecond))
	b := newElection(t, open(), key, "b", election.WithTTL(600*time.Millisecond))
	ta, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *election.Term, 1)
	go func() {
		tb, err := b.Campaign(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- tb
	}()
	time.Sleep(100 * time.Millisecond)
	if err := srv.Restart(false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ta.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the leader's term did not end after Redis lost the lock")
	}
	if !errors.Is(ta.Err(), lock.ErrLockLost) {
		t.Fatalf("term Err = %v", ta.Err())
	}
	tb := <-got
	if tb == nil {
		t.FailNow()
	}
	if tb.Token() <= ta.Token() {
		t.Fatalf("token %d after the restart, not above %d", tb.Token(), ta.Token())
	}
	tb.Resign(ctx)
}
