package redisfn_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/pipe"
	"github.com/coordkit/coordkit/internal/redisfn"
	"github.com/coordkit/coordkit/internal/testserver"
)

// TestLibraryLoads: the library loads on a real Redis 7 and registers
// every script's function; a Runner settles on FCALL.
func TestLibraryLoads(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	if err := redisfn.Load(ctx, rdb); err != nil {
		t.Fatalf("FUNCTION LOAD: %v", err)
	}
	if err := redisfn.Load(ctx, rdb); err != nil { // loaded already: the same code
		t.Fatalf("FUNCTION LOAD again: %v", err)
	}
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisfn.Library}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("FUNCTION LIST: %v %v", libs, err)
	}
	have := map[string]bool{}
	for _, f := range libs[0].Functions {
		have[f.Name] = true
	}
	for _, s := range redisfn.All() {
		if !have[s.Name()] {
			t.Errorf("%s (%s) not registered", s.Name(), s.File())
		}
	}
	if len(have) != len(redisfn.All()) {
		t.Errorf("%d functions registered, %d scripts", len(have), len(redisfn.All()))
	}
}

// functionsAllowed clears COORDKIT_REDIS_FUNCTIONS for the test (make
// test runs this package a second time with it "off"): these tests are
// about choosing between the two paths, and set it themselves.
func functionsAllowed(t *testing.T) { t.Setenv(redisfn.EnvVar, "") }

// call runs inspect.lua (read-only) on key through r and fails the test on
// an error.
func call(t *testing.T, r *redisfn.Runner, c redisfn.Caller, key string) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	if err := r.Run(ctx, c, redisfn.Inspect, hashlock.LockKeys("coordkit:lock:", key)).Err(); err != nil {
		t.Fatalf("%s by %v: %v", redisfn.Inspect.Name(), r.Mode(), err)
	}
}

// TestRunnerModes: a Runner of a Redis 7 settles on FCALL at its first
// call; with COORDKIT_REDIS_FUNCTIONS=off, on EVALSHA, and says why.
func TestRunnerModes(t *testing.T) {
	functionsAllowed(t)
	rdb := shared.Client(t)
	r := redisfn.NewRunner(rdb, nil)
	if r.Mode() != redisfn.Undecided {
		t.Fatalf("mode before any call: %v", r.Mode())
	}
	call(t, r, rdb, "k")
	if r.Mode() != redisfn.Functions || r.Why() != "" {
		t.Fatalf("mode %v (%q), want functions", r.Mode(), r.Why())
	}
	t.Setenv(redisfn.EnvVar, "off")
	r = redisfn.NewRunner(rdb, nil)
	call(t, r, rdb, "k")
	if r.Mode() != redisfn.EvalSha || !strings.Contains(r.Why(), "off") {
		t.Fatalf("mode %v (%q), want evalsha for %s=off", r.Mode(), r.Why(), redisfn.EnvVar)
	}
}

// TestFallbacks: where FUNCTION is missing (as on Redis 6: here renamed
// away), refused by an ACL, or where another build's library holds the
// name, the Runner runs the same scripts by EVALSHA, and they work.
func TestFallbacks(t *testing.T) {
	functionsAllowed(t)
	cases := []struct {
		name  string
		opts  []testserver.RedisOption
		setup func(ctx context.Context, t *testing.T, admin redis.UniversalClient) redis.UniversalClient
		why   string
	}{
		{"no FUNCTION command", []testserver.RedisOption{testserver.WithRedisArgs("--rename-command", "FUNCTION", `""`)}, nil, "unknown command"},
		{"ACL refuses FUNCTION", nil, func(ctx context.Context, t *testing.T, admin redis.UniversalClient) redis.UniversalClient {
			if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-function").Err(); err != nil {
				t.Fatal(err)
			}
			o := admin.(*redis.Client).Options()
			c := redis.NewClient(&redis.Options{Addr: o.Addr, Username: "app", Password: "pw"})
			t.Cleanup(func() { c.Close() })
			return c
		}, "NOPERM"},
		{"another build's library", nil, func(ctx context.Context, t *testing.T, admin redis.UniversalClient) redis.UniversalClient {
			other := fmt.Sprintf("#!lua name=%s\nredis.register_function('ck%d_other', function() return 1 end)\n", redisfn.Library, redisfn.Version)
			if err := admin.FunctionLoad(ctx, other).Err(); err != nil {
				t.Fatal(err)
			}
			return admin
		}, "another build"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 10*time.Second)
			srv := testserver.StartRedis(t, tc.opts...)
			rdb := srv.Client(t)
			if tc.setup != nil {
				rdb = tc.setup(ctx, t, rdb)
			}
			r := redisfn.NewRunner(rdb, nil)
			n := hashlock.Node{}
			s := hashlock.Server{Run: r, C: rdb}
			a, err := n.Acquire(ctx, s, "k", hashlock.NodeAcquire{Owner: "o", TTL: 5 * time.Second})
			if err != nil || !a.Held {
				t.Fatalf("Acquire by %v: %+v %v", r.Mode(), a, err)
			}
			if r.Mode() != redisfn.EvalSha || !strings.Contains(r.Why(), tc.why) {
				t.Fatalf("mode %v (%q), want evalsha because %q", r.Mode(), r.Why(), tc.why)
			}
			if left, err := n.Release(ctx, s, "k", hashlock.NodeRelease{Owner: "o", Request: "r"}); err != nil || left != 0 {
				t.Fatalf("Release: %d %v", left, err)
			}
		})
	}
}

// TestReloadAfterFlush: after FUNCTION FLUSH (or a restart without data,
// a failover to a node that never had the library), the next FCALL gets
// "Function not found", which ran nothing: the Runner loads the library
// again and sends the call once more.
func TestReloadAfterFlush(t *testing.T) {
	functionsAllowed(t)
	ctx := ctxTimeout(t, 10*time.Second)
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	r := redisfn.NewRunner(rdb, nil)
	call(t, r, rdb, "k")
	for _, how := range []string{"flush", "restart"} {
		switch how {
		case "flush":
			if err := rdb.FunctionFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		case "restart": // without data: the library is gone
			srv.Kill()
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
		}
		call(t, r, rdb, "k")
		if r.Mode() != redisfn.Functions {
			t.Fatalf("after %s: mode %v (%q)", how, r.Mode(), r.Why())
		}
	}
}

// TestClusterLoadsEveryMaster: on a Cluster the library is loaded on every
// master at the first call, and again on every master after one lost it.
func TestClusterLoadsEveryMaster(t *testing.T) {
	functionsAllowed(t)
	ctx := ctxTimeout(t, 30*time.Second)
	cl := testserver.StartRedisCluster(t)
	rdb := cl.Client(t)
	r := redisfn.NewRunner(rdb, nil)
	call(t, r, rdb, "k")
	if r.Mode() != redisfn.Functions {
		t.Fatalf("mode %v (%q)", r.Mode(), r.Why())
	}
	loaded := func() int {
		n := 0
		for _, node := range cl.Nodes() {
			c := redis.NewClient(&redis.Options{Addr: node.Addr()})
			libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisfn.Library}).Result()
			c.Close()
			if err == nil && len(libs) == 1 {
				n++
			}
		}
		return n
	}
	if n := loaded(); n != len(cl.Nodes()) {
		t.Fatalf("library on %d of %d nodes", n, len(cl.Nodes()))
	}
	node, err := cl.NodeFor(ctx, hashlock.LockKeys("coordkit:lock:", "k")[0])
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: node.Addr()})
	defer c.Close()
	if err := c.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	call(t, r, rdb, "k")
	if n := loaded(); n != len(cl.Nodes()) {
		t.Fatalf("after a flush: library on %d of %d nodes", n, len(cl.Nodes()))
	}
}

// TestTokensFollowTheClock: a library keeps its top-level locals from one
// call to the next, so fence.lua's clock reading must be taken anew by
// every call: a token handed out later is later by at least the time in
// between (on another key too, whose counter is fresh).
func TestTokensFollowTheClock(t *testing.T) {
	functionsAllowed(t)
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	r := redisfn.NewRunner(rdb, nil)
	s := hashlock.Server{Run: r, C: rdb}
	n := hashlock.Node{}
	key := fmt.Sprintf("clock-%d", time.Now().UnixNano())
	a, err := n.Acquire(ctx, s, key+"a", hashlock.NodeAcquire{Owner: "o", TTL: 5 * time.Second})
	if err != nil || !a.Held {
		t.Fatal(a, err)
	}
	if r.Mode() != redisfn.Functions {
		t.Fatalf("mode %v", r.Mode())
	}
	const gap = 30 * time.Millisecond
	time.Sleep(gap)
	b, err := n.Acquire(ctx, s, key+"b", hashlock.NodeAcquire{Owner: "o", TTL: 5 * time.Second})
	if err != nil || !b.Held {
		t.Fatal(b, err)
	}
	if d := b.Token - a.Token; d < gap.Microseconds() {
		t.Fatalf("tokens %d then %d, %d µs apart; the calls were %v apart", a.Token, b.Token, d, gap)
	}
}

// TestFCallRefusedLater: a Runner that settled on FCALL and is then
// refused it (an ACL changed; a failover to an older server) runs that
// call and the next ones by EVALSHA: the refused FCALL ran nothing.
func TestFCallRefusedLater(t *testing.T) {
	functionsAllowed(t)
	ctx := ctxTimeout(t, 10*time.Second)
	srv := testserver.StartRedis(t)
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "pw"})
	defer rdb.Close()
	r := redisfn.NewRunner(rdb, nil)
	call(t, r, rdb, "k")
	if r.Mode() != redisfn.Functions {
		t.Fatalf("mode %v (%q)", r.Mode(), r.Why())
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "-fcall").Err(); err != nil {
		t.Fatal(err)
	}
	call(t, r, rdb, "k")
	if r.Mode() != redisfn.EvalSha || !strings.Contains(r.Why(), "fcall") {
		t.Fatalf("mode %v (%q), want evalsha after FCALL was refused", r.Mode(), r.Why())
	}
}

// libraryCode pins the SHA-256 of the library's code for each version: a
// change of the Lua must come with a new Version, so that a server that
// has one version's code loaded never serves another's calls under the
// same names (the Runner falls back to EVALSHA when the code under its
// name differs, but two builds that both claim a version would each load
// their own after a FUNCTION FLUSH and call the other's).
var libraryCode = map[int]string{
	1: "217d4749a2d1502761340810f4419a43e1739a5fef6ee7d09f9c89e355b89649", // db67cfa, never released
	2: "9d260c231fc96a9a5d4f0ed4ef54097e6b163f0e25f35ab617fd43c479060884", // functions with flags (allow-oom, no-writes)
}

// TestLibraryVersion: the library's code is the one pinned for Version.
func TestLibraryVersion(t *testing.T) {
	sum := sha256.Sum256([]byte(redisfn.Code()))
	got := hex.EncodeToString(sum[:])
	if want, ok := libraryCode[redisfn.Version]; !ok || got != want {
		t.Fatalf("library code of version %d has SHA-256 %s, pinned %q: a change of the Lua needs a new Version (and its pin)", redisfn.Version, got, want)
	}
	if !strings.HasPrefix(redisfn.Code(), "#!lua name="+redisfn.Library+"\n") {
		t.Fatalf("library header: %.40q", redisfn.Code())
	}
}

// TestRingLoadsEveryShard: a Ring (which redlock takes as a master) sends
// commands without keys to one shard: the library is loaded on each.
func TestRingLoadsEveryShard(t *testing.T) {
	functionsAllowed(t)
	ctx := ctxTimeout(t, 10*time.Second)
	a, b := testserver.StartRedis(t), testserver.StartRedis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	defer ring.Close()
	r := redisfn.NewRunner(ring, nil)
	call(t, r, ring, "k")
	if r.Mode() != redisfn.Functions {
		t.Fatalf("mode %v (%q)", r.Mode(), r.Why())
	}
	for _, s := range []*testserver.Redis{a, b} {
		libs, err := s.Client(t).FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisfn.Library}).Result()
		if err != nil || len(libs) != 1 {
			t.Fatalf("shard %s: %v %v", s.Addr(), libs, err)
		}
	}
}

// TestGoReloadAfterFlush: Go, the form redlock sends through its
// pipeliners, after FUNCTION FLUSH: the answer "Function not found" (the
// call did not run) is not handed on; the library is loaded again and the
// call sent once more, off the pipeliner's goroutine; Close waits for it.
func TestGoReloadAfterFlush(t *testing.T) {
	functionsAllowed(t)
	ctx := ctxTimeout(t, 10*time.Second)
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	p := pipe.New(rdb, 1)
	r := redisfn.NewRunner(rdb, nil)
	r.Prepare(ctx)
	if r.Mode() != redisfn.Functions {
		t.Fatalf("mode %v (%q)", r.Mode(), r.Why())
	}
	if err := rdb.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	r.Go(ctx, p, redisfn.Inspect, hashlock.LockKeys("coordkit:lock:", "k"), nil, func(cmd *redis.Cmd) { got <- cmd.Err() })
	if err := <-got; err != nil {
		t.Fatalf("Go after FUNCTION FLUSH: %v", err)
	}
	p.Close()
	r.Close()
	if r.Mode() != redisfn.Functions {
		t.Fatalf("mode %v (%q) after the reload", r.Mode(), r.Why())
	}
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisfn.Library}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("library after the reload: %v %v", libs, err)
	}
}
