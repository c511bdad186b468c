package testserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// quick returns a client that gives up fast, so faults show as errors.
func quick(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisKillPauseRestart(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := ctxT(t, 30*time.Second)
	c := quick(t, r.Addr())
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET on a paused server answered")
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after resume: %q, %v", v, err)
	}

	if err := r.Restart(true); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after restart with data: %q, %v", v, err)
	}

	pid := r.PID()
	r.Kill()
	if r.Running() {
		t.Fatal("still running after Kill")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := r.Restart(false); err != nil {
		t.Fatal(err)
	}
	if r.PID() == pid {
		t.Fatal("restart kept the old PID")
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after restart without data: want redis.Nil, got %v", err)
	}
}

func TestRedisAOFSurvivesKill(t *testing.T) {
	r := testserver.StartRedis(t, testserver.WithAOF("always"))
	ctx := ctxT(t, 30*time.Second)
	c := quick(t, r.Addr())
	if err := c.Set(ctx, "k", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "kept" {
		t.Fatalf("after kill with AOF: %q, %v", v, err)
	}
}

func TestRedisSnapshot(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := ctxT(t, 30*time.Second)
	c := quick(t, r.Addr())
	c.Set(ctx, "counter", 1, 0)
	snap, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, "counter", 2, 0)
	if err := r.RestartFromSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "counter").Int(); err != nil || v != 1 {
		t.Fatalf("after restart from snapshot: %d, %v", v, err)
	}
}

func TestRedisMastersAreIndependent(t *testing.T) {
	ms := testserver.StartRedisMasters(t, 3)
	ctx := ctxT(t, 30*time.Second)
	seen := map[string]bool{}
	for i, m := range ms {
		if seen[m.Addr()] {
			t.Fatalf("master %d shares address %s", i, m.Addr())
		}
		seen[m.Addr()] = true
		m.Client(t).Set(ctx, "who", i, 0)
	}
	for i, m := range ms {
		if v, _ := m.Client(t).Get(ctx, "who").Int(); v != i {
			t.Fatalf("master %d holds %d", i, v)
		}
	}
}

func TestRedisCluster(t *testing.T) {
	cl := testserver.StartRedisCluster(t)
	ctx := ctxT(t, 60*time.Second)
	c := cl.Client(t)
	for i := range 30 {
		key := fmt.Sprintf("key-%d", i)
		if err := c.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		node, err := cl.NodeFor(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		// The key lives on the node that serves its slot, and only there.
		if v, err := quick(t, node.Addr()).Get(ctx, key).Int(); err != nil || v != i {
			t.Fatalf("%s on its node %s: %d, %v", key, node.Addr(), v, err)
		}
	}
	// A multi-key command with one hash tag works on the cluster.
	if err := c.MSet(ctx, "{t}a", 1, "{t}b", 2).Err(); err != nil {
		t.Fatal(err)
	}
	// Killing the node of a key makes that key unavailable.
	node, _ := cl.NodeFor(ctx, "key-0")
	node.Kill()
	qc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1,
		ReadTimeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
	defer qc.Close()
	if err := qc.Get(ctx, "key-0").Err(); err == nil {
		t.Fatal("GET on a killed node's key answered")
	}
}

func TestRedisSentinel(t *testing.T) {
	s := testserver.StartRedisSentinel(t)
	ctx := ctxT(t, 60*time.Second)
	c := s.Client(t)
	if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if a, err := s.MasterAddr(ctx); err != nil || a != s.Master().Addr() {
		t.Fatalf("master addr %q, %v", a, err)
	}
	if err := s.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	if a, _ := s.MasterAddr(ctx); a != s.Replica().Addr() {
		t.Fatalf("after failover the master is %q, want the replica %q", a, s.Replica().Addr())
	}
	// The failover client follows the new master.
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := c.Set(ctx, "k", "after", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write after failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v, err := quick(t, s.Replica().Addr()).Get(ctx, "k").Result(); err != nil || v != "after" {
		t.Fatalf("promoted replica holds %q, %v", v, err)
	}
}

func TestProxy(t *testing.T) {
	r := testserver.StartRedis(t)
	p := testserver.StartProxy(t, r.Addr())
	ctx := ctxT(t, 30*time.Second)
	c := quick(t, p.Addr())
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	t.Run("latency", func(t *testing.T) {
		p.SetLatency(50 * time.Millisecond)
		defer p.Reset()
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// Both directions are delayed: at least 2 × 50 ms.
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Fatalf("round trip took %v through a 50 ms proxy", d)
		}
	})
	t.Run("cut", func(t *testing.T) {
		if p.Conns() == 0 {
			t.Fatal("no proxied connection")
		}
		p.Cut()
		if n := p.Conns(); n != 0 {
			t.Fatalf("%d connections left after Cut", n)
		}
		// The pooled connection is dead; go-redis reports it and redials.
		c.Ping(ctx)
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("no recovery after Cut: %v", err)
		}
	})
	t.Run("blackhole", func(t *testing.T) {
		p.SetBlackhole(true)
		start := time.Now()
		err := c.Ping(ctx).Err()
		if err == nil {
			t.Fatal("PING answered through a black hole")
		}
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Fatalf("black hole failed fast (%v): %v", d, err)
		}
		p.Reset()
		p.Cut() // drop the stalled connections
		if err := c.Ping(ctx).Err(); err != nil {
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("no recovery after black hole: %v", err)
			}
		}
	})
	t.Run("drop new", func(t *testing.T) {
		p.SetDropNew(true)
		defer p.Reset()
		fresh := quick(t, p.Addr())
		if err := fresh.Ping(ctx).Err(); err == nil {
			t.Fatal("new connection served while dropping")
		}
	})
}

func TestZooKeeper(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	if m, err := z.Nodes()[0].Mode(); err != nil || m != "standalone" {
		t.Fatalf("mode %q, %v", m, err)
	}
	c := z.DialT(t, 2*time.Second, nil)
	if _, err := c.Create("/persist", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create("/eph", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}

	t.Run("expire session", func(t *testing.T) {
		old := c.SessionID()
		if err := c.Expire(); err != nil {
			t.Fatal(err)
		}
		waitZK(t, func() bool { return c.State() == zk.StateHasSession && c.SessionID() != old })
		if ok, _, err := c.Exists("/eph"); err != nil || ok {
			t.Fatalf("ephemeral node survived its session: %v, %v", ok, err)
		}
	})
	t.Run("kill and restart", func(t *testing.T) {
		n := z.Nodes()[0]
		n.Kill()
		if _, _, err := c.Get("/persist"); err == nil {
			t.Fatal("GET answered with the server killed")
		}
		if err := n.Restart(); err != nil {
			t.Fatal(err)
		}
		waitZK(t, func() bool {
			d, _, err := c.Get("/persist")
			return err == nil && string(d) == "x"
		})
	})
}

func TestZooKeeperEnsemble(t *testing.T) {
	z := testserver.StartZooKeeperEnsemble(t, 3)
	modes := map[string]int{}
	for _, n := range z.Nodes() {
		m, err := n.Mode()
		if err != nil {
			t.Fatal(err)
		}
		modes[m]++
	}
	if modes["leader"] != 1 || modes["follower"] != 2 {
		t.Fatalf("modes %v", modes)
	}
	c := z.DialT(t, 4*time.Second, nil)
	if _, err := c.Create("/a", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	// Kill the leader: the other two elect a new one and keep serving.
	var leader *testserver.ZKNode
	for _, n := range z.Nodes() {
		if m, _ := n.Mode(); m == "leader" {
			leader = n
		}
	}
	leader.Kill()
	waitZK(t, func() bool {
		_, err := c.Create("/b", nil, 0, zk.WorldACL(zk.PermAll))
		return err == nil || errors.Is(err, zk.ErrNodeExists)
	})
	if err := leader.Restart(); err != nil {
		t.Fatal(err)
	}
	if m, err := leader.Mode(); err != nil || m != "follower" {
		t.Fatalf("restarted node: %q, %v", m, err)
	}
}

func waitZK(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMissingBinaryNamesInstallCommand(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for name, start := range map[string]func() error{
		"redis":     func() error { _, err := testserver.NewRedis(); return err },
		"zookeeper": func() error { _, err := testserver.NewZooKeeper(); return err },
		"etcd":      func() error { _, err := testserver.NewEtcd(); return err },
	} {
		err := start()
		if !errors.Is(err, testserver.ErrMissingBinary) || !strings.Contains(err.Error(), "apt-get install") {
			t.Errorf("%s: want ErrMissingBinary naming apt-get install, got %v", name, err)
		}
	}
}

func TestNothingListensAfterClose(t *testing.T) {
	r, err := testserver.NewRedis()
	if err != nil {
		t.Fatal(err)
	}
	a := r.Addr()
	r.Close()
	if c, err := net.DialTimeout("tcp", a, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("server still listening after Close")
	}
}

// TestFailedStartKeepsLog: a server that exits during start-up fails with
// an error that names its log file and quotes the server's own complaint;
// the file stays (the rest of the server's directory is removed).
func TestFailedStartKeepsLog(t *testing.T) {
	_, err := testserver.NewRedis(testserver.WithRedisArgs("--no-such-directive", "x"))
	if err == nil {
		t.Fatal("redis-server started with an unknown directive")
	}
	m := regexp.MustCompile(`\(log: (\S+redis\.log)\)`).FindStringSubmatch(err.Error())
	if m == nil || !strings.Contains(err.Error(), "no-such-directive") {
		t.Fatalf("error names no log or lacks the server's complaint: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(m[1])) })
	b, rerr := os.ReadFile(m[1])
	if rerr != nil || !strings.Contains(string(b), "no-such-directive") {
		t.Fatalf("log %s: %v: %q", m[1], rerr, b)
	}
	ents, _ := os.ReadDir(filepath.Dir(m[1]))
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".log") {
			t.Errorf("%s left beside the log", e.Name())
		}
	}
}

// TestRedisRestartKeepsEveryWrite: a restart with the data keeps every
// write the server acknowledged, also those made while it was being
// restarted. A SAVE followed by a kill lost the writes in between.
func TestRedisRestartKeepsEveryWrite(t *testing.T) {
	r := testserver.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	stop := make(chan struct{})
	acked := make(chan []int, 1)
	go func() {
		var ok []int
		for i := 0; ; i++ {
			select {
			case <-stop:
				acked <- ok
				return
			default:
			}
			if c.Set(ctx, fmt.Sprint("w", i), i, 0).Err() == nil {
				ok = append(ok, i)
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := r.Restart(true); err != nil {
		t.Fatal(err)
	}
	close(stop)
	ok := <-acked
	if len(ok) == 0 {
		t.Fatal("no write acknowledged")
	}
	for _, i := range ok {
		if err := c.Get(ctx, fmt.Sprint("w", i)).Err(); err != nil {
			t.Fatalf("write %d of %d acknowledged before the restart is gone: %v", i, len(ok), err)
		}
	}
}
