package contract_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/contract"
	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/zklock"
)

var (
	single  *testserver.Redis
	masters []*testserver.Redis
	zkSrv   *testserver.ZooKeeper
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
	stopSQL, err := startSQL()
	defer stopSQL()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return r.m.Run()
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(serverRun{m},
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		// database/sql's connection opener lives as long as its *sql.DB.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// closer and backend are the contract's types, under the names these
// tests have always used.
type (
	closer  = contract.Closer
	backend = contract.Backend
)

func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func backends() []backend {
	// Renewed every second: a loss is seen within it. 900 ms (renewed every
	// 300 ms) let a starved host expire a lease before its renewal ran, and a
	// check about the loss reason got ErrExpired instead (a review of the
	// suite for sub-TTL bounds under make test-stress).
	const ttl = 3 * time.Second
	return []backend{
		{
			Name: "lock.Client",
			Open: func(t *testing.T) closer {
				c := lock.New(redisClient(t, single.Addr()), lock.WithDefaultTTL(ttl))
				t.Cleanup(func() { c.Close() })
				return c
			},
			Reentrant: true, TTL: true, Reason: lock.ErrNotHeld,
			Lose: func(t *testing.T, _ closer, key string) {
				mustDel(t, single, lock.DefaultPrefix+"{"+key+"}")
			},
		},
		{
			Name: "lock.Simple",
			Open: func(t *testing.T) closer {
				c := lock.NewSimple(redisClient(t, single.Addr()), lock.WithDefaultTTL(ttl))
				t.Cleanup(func() { c.Close() })
				return c
			},
			Reentrant: false, TTL: true, Reason: lock.ErrNotHeld,
			Lose: func(t *testing.T, _ closer, key string) {
				mustDel(t, single, lock.DefaultPrefix+"simple:{"+key+"}")
			},
		},
		{
			Name: "redlock.Client",
			Open: func(t *testing.T) closer {
				var cs []*redis.Client
				for _, m := range masters {
					cs = append(cs, redisClient(t, m.Addr()))
				}
				c, err := redlock.New(redlock.Masters(cs...), redlock.WithDefaultTTL(ttl), redlock.WithNodeTimeout(250*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			},
			Reentrant: true, TTL: true, Reason: lock.ErrNotHeld,
			Lose: func(t *testing.T, _ closer, key string) {
				n, err := hashlock.NewNode(redlock.DefaultPrefix)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range masters {
					// A quorum grants at once; a master that answers later
					// takes its level then: delete once it has.
					waitExists(t, m, n.Keys(key).Lock)
					mustDel(t, m, n.Keys(key).Lock)
				}
			},
		},
		{
			Name: "zklock.Client",
			Open: func(t *testing.T) closer {
				conn := zkSrv.DialT(t, 3*time.Second, nil)
				t.Cleanup(conn.Close)
				c, err := zklock.New(conn.Conn, zklock.WithRoot("/contract"), zklock.WithSessionTimeout(3*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return zkCloser{c, conn}
			},
			Reentrant: true, TTL: false, Reason: zklock.ErrSessionExpired,
			Lose: func(t *testing.T, c closer, _ string) {
				if err := c.(zkCloser).conn.Expire(); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
}

// zkCloser keeps the test connection beside the zklock Client, for lose.
type zkCloser struct {
	*zklock.Client
	conn *testserver.ZKConn
}

func mustDel(t *testing.T, r *testserver.Redis, key string) {
	t.Helper()
	n, err := r.Client(t).Del(context.Background(), key).Result()
	if err != nil || n != 1 {
		t.Fatalf("DEL %s: %d, %v (want 1 key deleted)", key, n, err)
	}
}

// waitExists waits, up to 2 s, until key exists on r.
func waitExists(t *testing.T, r *testserver.Redis, key string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n, err := r.Client(t).Exists(context.Background(), key).Result()
		if err == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not on %s 2 s after the lock was obtained: %d, %v", key, r.Addr(), n, err)
		}
	}
}

// TestContract runs each check against each backend.
func TestContract(t *testing.T) {
	for _, b := range append(backends(), sqlBackends()...) {
		t.Run(b.Name, func(t *testing.T) { contract.Run(t, b) })
	}
}
