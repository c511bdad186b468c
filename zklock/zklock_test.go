package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/zklock"
)

// server is the package's shared standalone ZooKeeper (a JVM takes seconds
// to start); tests that kill nodes start their own.
var server *testserver.ZooKeeper

func TestMain(m *testing.M) {
	z, err := testserver.NewZooKeeper()
	if err != nil {
		fmt.Fprintln(os.Stderr, "zklock tests:", err)
		os.Exit(1)
	}
	server = z
	// The examples connect as a user's program would, to servers from its
	// environment.
	os.Setenv("ZK_SERVERS", strings.Join(z.Servers(), ","))
	code := m.Run()
	z.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const sessionTimeout = 2 * time.Second

// dial connects to z through fault proxies; closed when the test ends.
func dial(t *testing.T, z *testserver.ZooKeeper, timeout time.Duration) *testserver.ZKConn {
	t.Helper()
	return z.DialT(t, timeout, nil)
}

// newClient returns a Client on conn with the test's own root path, closed
// when the test ends (before conn). Its session timeout is unknown (0)
// unless opts set it: the tests' sessions are shorter than
// DefaultSessionTimeout.
func newClient(t *testing.T, conn *testserver.ZKConn, opts ...zklock.Option) *zklock.Client {
	t.Helper()
	c, err := zklock.New(conn.Conn, append([]zklock.Option{zklock.WithRoot(root(t)), zklock.WithSessionTimeout(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// root is the test's own root path.
func root(t *testing.T) string {
	return "/zklock-test/" + url.PathEscape(strings.ReplaceAll(t.Name(), "/", "."))
}

// parentOf is the znode under which key's lock nodes live (the schema of doc.go).
func parentOf(t *testing.T, key string) string { return root(t) + "/" + url.PathEscape(key) }

// children lists key's lock nodes (none if the parent is gone).
func children(t *testing.T, conn *testserver.ZKConn, key string) []string {
	t.Helper()
	names, _, err := conn.Children(parentOf(t, key))
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("children of %s: %v", parentOf(t, key), err)
	}
	return names
}

// waitChildren waits until key has n lock nodes. A connection that is
// still coming back (after a cut or partition) is waited for too.
func waitChildren(t *testing.T, conn *testserver.ZKConn, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _, err := conn.Children(parentOf(t, key))
		switch {
		case errors.Is(err, zk.ErrNoNode):
			err = nil
		case errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrConnectionClosed):
			got = nil // not connected yet: ask again
		case err != nil:
			t.Fatalf("children of %s: %v", parentOf(t, key), err)
		}
		if err == nil && len(got) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %q: %d lock nodes %v (last error %v), want %d", key, len(got), got, err, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func obtain(t *testing.T, l lock.Locker, ctx context.Context, key string) lock.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	lease, err := l.Obtain(ctx, key)
	if err != nil {
		t.Fatalf("Obtain(%q): %v", key, err)
	}
	return lease
}

func release(t *testing.T, lease lock.Lease) {
	t.Helper()
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", lease.Key(), err)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestNew(t *testing.T) {
	conn := dial(t, server, sessionTimeout)
	tests := []struct {
		name string
		conn *zk.Conn
		opts []zklock.Option
		want error
	}{
		{"nil conn", nil, nil, zklock.ErrNilConn},
		{"default root", conn.Conn, nil, nil},
		{"custom root", conn.Conn, []zklock.Option{zklock.WithRoot("/a/b")}, nil},
		{"relative root", conn.Conn, []zklock.Option{zklock.WithRoot("a/b")}, zklock.ErrInvalidRoot},
		{"trailing slash", conn.Conn, []zklock.Option{zklock.WithRoot("/a/")}, zklock.ErrInvalidRoot},
		{"slash only", conn.Conn, []zklock.Option{zklock.WithRoot("/")}, zklock.ErrInvalidRoot},
		{"empty segment", conn.Conn, []zklock.Option{zklock.WithRoot("/a//b")}, zklock.ErrInvalidRoot},
		{"dot segment", conn.Conn, []zklock.Option{zklock.WithRoot("/a/../b")}, zklock.ErrInvalidRoot},
		{"negative session timeout", conn.Conn, []zklock.Option{zklock.WithSessionTimeout(-time.Second)}, zklock.ErrInvalidSessionTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := zklock.New(tt.conn, tt.opts...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("New: %v, want %v", err, tt.want)
			}
			if c != nil {
				c.Close()
			}
		})
	}
}

// TestDefaultSessionTimeout: without WithSessionTimeout a Client assumes
// DefaultSessionTimeout (4 s, workerid's default too), so a lease knows how
// long it is held (at most T/2 ahead); WithSessionTimeout(0) is the unknown
// mode, where no bound is known.
func TestDefaultSessionTimeout(t *testing.T) {
	if zklock.DefaultSessionTimeout != 4*time.Second {
		t.Fatalf("DefaultSessionTimeout = %v, want 4s", zklock.DefaultSessionTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn := dial(t, server, zklock.DefaultSessionTimeout)
	for _, tt := range []struct {
		name    string
		opts    []zklock.Option
		bounded bool
	}{
		{"default", nil, true},
		{"unknown", []zklock.Option{zklock.WithSessionTimeout(0)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := zklock.New(conn.Conn, append([]zklock.Option{zklock.WithRoot(root(t))}, tt.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l, err := c.Obtain(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			until := l.(lock.LeaseStatus).Until()
			now := time.Now()
			switch {
			case !tt.bounded && !until.IsZero():
				t.Errorf("Until = %v, want the zero Time (no bound known)", until)
			case tt.bounded && (!until.After(now) || until.After(now.Add(zklock.DefaultSessionTimeout/2))):
				t.Errorf("Until = %v from now, want within (0, %v]", until.Sub(now), zklock.DefaultSessionTimeout/2)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	conn := dial(t, server, sessionTimeout)
	c := newClient(t, conn)
	top := root(t)
	tests := []struct {
		name, key string
		want      error
		node      string // the key's parent name
	}{
		{"empty", "", zklock.ErrInvalidKey, ""},
		{"too long", strings.Repeat("k", zklock.MaxKeyLen+1), zklock.ErrInvalidKey, ""},
		{"longest", strings.Repeat("k", zklock.MaxKeyLen), nil, strings.Repeat("k", zklock.MaxKeyLen)},
		{"plain", "orders:42", nil, "orders:42"},
		{"slashes escaped", "a/b/c", nil, "a%2Fb%2Fc"},
		{"percent escaped", "100%", nil, "100%25"},
		{"dot", ".", nil, "%2E"},
		{"dot dot", "..", nil, "%2E%2E"},
		{"unicode", "clé", nil, "cl%C3%A9"},
		{"control", "a\x00b", nil, "a%00b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, l := range []lock.Locker{c, c.Read(), c.Write()} {
				lease, err := l.TryObtain(context.Background(), tt.key)
				if !errors.Is(err, tt.want) {
					t.Fatalf("TryObtain: %v, want %v", err, tt.want)
				}
				if err != nil {
					if _, err := l.Obtain(context.Background(), tt.key); !errors.Is(err, tt.want) {
						t.Fatalf("Obtain: %v, want %v", err, tt.want)
					}
					continue
				}
				if n, _, err := conn.Children(top + "/" + tt.node); err != nil || len(n) != 1 {
					t.Fatalf("children of %s: %v %v, want one lock node", tt.node, n, err)
				}
				release(t, lease)
			}
		})
	}
}

// TestMutualExclusion runs 16 goroutines over 3 connections through a
// non-atomic read-modify-write of a znode: no update may be lost.
func TestMutualExclusion(t *testing.T) {
	const goroutines, rounds = 16, 8
	key := "counter"
	var clients []*zklock.Client
	var conns []*testserver.ZKConn
	for range 3 {
		conn := dial(t, server, sessionTimeout)
		conns = append(conns, conn)
		clients = append(clients, newClient(t, conn))
	}
	counter := root(t) + "-counter"
	if _, err := conns[0].Create(counter, []byte("0"), 0, zk.WorldACL(zk.PermAll)); errors.Is(err, zk.ErrNodeExists) {
		_, err = conns[0].Set(counter, []byte("0"), -1) // left by an earlier run (-count=N)
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, c := conns[g%3], clients[g%3]
			for range rounds {
				err := lock.Do(context.Background(), c, key, func(ctx context.Context) error {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					defer inside.Add(-1)
					b, _, err := conn.Get(counter)
					if err != nil {
						return err
					}
					var n int
					fmt.Sscan(string(b), &n)
					_, err = conn.Set(counter, []byte(fmt.Sprint(n+1)), -1)
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b, _, err := conns[0].Get(counter)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), fmt.Sprint(goroutines*rounds); got != want {
		t.Fatalf("counter = %s, want %s (updates lost)", got, want)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlapping critical sections", n)
	}
	if n := children(t, conns[0], key); len(n) != 0 {
		t.Fatalf("lock nodes left: %v", n)
	}
}

// TestFIFO queues waiters in a known order and checks they acquire in it.
func TestFIFO(t *testing.T) {
	const waiters = 6
	key := "fifo"
	conn := dial(t, server, sessionTimeout)
	c := newClient(t, conn)
	first := obtain(t, c, context.Background(), key)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range waiters {
		// Each waiter on its own connection, queued before the next starts.
		wc := newClient(t, dial(t, server, sessionTimeout))
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := wc.Obtain(context.Background(), key)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			lease.Release(context.Background())
		}()
		waitChildren(t, conn, key, i+2)
	}
	release(t, first)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("acquisition order %v, want 0..%d", order, waiters-1)
		}
	}
}

func TestTokenAndReentry(t *testing.T) {
	key := "reentry"
	conn := dial(t, server, sessionTimeout)
	c := newClient(t, conn)
	other := newClient(t, dial(t, server, sessionTimeout))

	var last int64
	for range 3 {
		lease := obtain(t, c, context.Background(), key)
		if lease.Token() <= last {
			t.Fatalf("token %d after %d: not increasing", lease.Token(), last)
		}
		last = lease.Token()
		release(t, lease)
	}

	err := lock.Do(context.Background(), c, key, func(ctx context.Context) error {
		outer, _ := lock.OwnerFrom(ctx)
		return lock.Do(ctx, c, key, func(ctx context.Context) error {
			inner, _ := lock.OwnerFrom(ctx)
			if inner != outer {
				t.Errorf("owner changed: %q, %q", outer, inner)
			}
			if n := children(t, conn, key); len(n) != 1 {
				t.Errorf("re-entry created a node: %v", n)
			}
			lease, err := c.Obtain(ctx, key) // a third level, by hand
			if err != nil {
				return err
			}
			if lease.Token() <= last {
				t.Errorf("token %d after %d", lease.Token(), last)
			}
			if err := lease.Release(ctx); err != nil {
				return err
			}
			if err := lease.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("second Release: %v, want ErrNotHeld", err)
			}
			if _, err := other.TryObtain(context.Background(), key); !errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("other owner's TryObtain during re-entry: %v, want ErrNotObtained", err)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	// Released by the outermost level only: now free.
	lease, err := other.TryObtain(context.Background(), key)
	if err != nil {
		t.Fatalf("TryObtain after Do: %v", err)
	}
	release(t, lease)
	if n := children(t, conn, key); len(n) != 0 {
		t.Fatalf("lock nodes left: %v", n)
	}
}

func TestTryObtainLeavesNoNode(t *testing.T) {
	key := "try"
	conn := dial(t, server, sessionTimeout)
	c := newClient(t, conn)
	holder := obtain(t, c, context.Background(), key)
	for _, l := range []lock.Locker{c, c.Read(), c.Write()} {
		if _, err := l.TryObtain(context.Background(), key); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("TryObtain on a held key: %v, want ErrNotObtained", err)
		}
	}
	names := children(t, conn, key)
	if len(names) != 1 {
		t.Fatalf("lock nodes %v, want the holder's only", names)
	}
	_, st, err := conn.Get(parentOf(t, key) + "/" + names[0])
	if err != nil {
		t.Fatal(err)
	}
	if holder.Token() != st.Czxid {
		t.Fatalf("token %d, want the node's czxid %d", holder.Token(), st.Czxid)
	}
	release(t, holder)
}

func TestCancelWhileWaiting(t *testing.T) {
	key := "cancel"
	conn := dial(t, server, sessionTimeout)
	c := newClient(t, conn)
	holder := obtain(t, c, context.Background(), key)
	for _, l := range []lock.Locker{c, c.Write(), c.Read()} {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := l.Obtain(ctx, key)
			errc <- err
		}()
		waitChildren(t, conn, key, 2)
		cancelled := time.Now()
		cancel()
		err := <-errc
		if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Obtain: %v, want ErrNotObtained and context.Canceled", err)
		}
		holderOnly(t, conn, key, "after cancel", time.Since(cancelled))
	}
	// A deadline behaves the same.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Obtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Obtain past deadline: %v", err)
	}
	dl, _ := ctx.Deadline()
	holderOnly(t, conn, key, "after deadline", time.Since(dl))
	release(t, holder)
	if n := children(t, conn, key); len(n) != 0 {
		t.Fatalf("lock nodes left: %v", n)
	}
}

// TestAbandonedPredecessorNotAGrant: a waiter whose predecessor abandons
// its attempt (its node deleted) while the holder ahead of both still holds
// lists the children again and goes on waiting (zklock/doc.go: a waiter
// holds the lock only when no node precedes its own). Mutant 13, which
// takes the watched node's deletion for the grant, fails here.
func TestAbandonedPredecessorNotAGrant(t *testing.T) {
	key := "abandoned-pred"
	conn := dial(t, server, sessionTimeout)
	c := newClient(t, conn)
	holder := obtain(t, c, context.Background(), key)
	// The second in line gives up once the third queued behind it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	err2 := make(chan error, 1)
	go func() {
		_, err := c.Obtain(ctx2, key)
		err2 <- err
	}()
	waitChildren(t, conn, key, 2)
	got3 := make(chan lock.Lease, 1)
	go func() {
		l, err := c.Obtain(context.Background(), key)
		if err != nil {
			t.Error(err)
		}
		got3 <- l
	}()
	waitChildren(t, conn, key, 3)
	// The third watches the second's node before the second gives up (a
	// watch set after the deletion finds no node and lists again anyway).
	names := children(t, conn, key)
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
	second := parentOf(t, key) + "/" + names[1]
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		paths, err := server.Nodes()[0].WatchedPaths()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(paths, second) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no watch on %s within 10 s (watched: %v)", second, paths)
		}
	}
	cancel2()
	if err := <-err2; !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("abandoned Obtain: %v, want ErrNotObtained", err)
	}
	select {
	case l := <-got3:
		if l != nil {
			l.Release(context.Background())
		}
		t.Fatal("the third in line obtained the lock while its holder still held it")
	case <-time.After(500 * time.Millisecond):
	}
	release(t, holder)
	select {
	case l := <-got3:
		if l != nil {
			release(t, l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the third in line did not obtain the lock within 10 s of the release")
	}
}

// holderOnly checks that key has one lock node left (the holder's) after
// an Obtain gave up and returned took after its ctx ended. A given-up
// attempt deletes its node before returning if the server answers within a
// second (package doc); past that it may still be deleting it in the
// background, and the node's deletion is waited for.
func holderOnly(t *testing.T, conn *testserver.ZKConn, key, when string, took time.Duration) {
	t.Helper()
	n := children(t, conn, key)
	if len(n) == 1 {
		return
	}
	if took < time.Second {
		t.Fatalf("%s: lock nodes %v %v after ctx ended, want the holder's only", when, n, took)
	}
	t.Logf("%s: Obtain returned %v after ctx ended, its node %v deleted in the background", when, took, n)
	waitChildren(t, conn, key, 1)
}

func TestParentRecreated(t *testing.T) {
	key := "container"
	conn := dial(t, server, sessionTimeout)
	c := newClient(t, conn)
	release(t, obtain(t, c, context.Background(), key))
	// The parent is a container node, which the server's ContainerManager
	// deletes once empty (every minute by default): deleted under our feet,
	// it is made again.
	if err := conn.Delete(parentOf(t, key), -1); err != nil {
		t.Fatal(err)
	}
	release(t, obtain(t, c, context.Background(), key))
}

func TestDigestACL(t *testing.T) {
	key := "acl"
	conn := dial(t, server, sessionTimeout)
	if err := conn.AddAuth("digest", []byte("alice:secret")); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, conn, zklock.WithACL(zk.DigestACL(zk.PermAll, "alice", "secret")))
	lease := obtain(t, c, context.Background(), key)

	stranger := dial(t, server, sessionTimeout)
	names := children(t, conn, key)
	if len(names) != 1 {
		t.Fatalf("lock nodes %v", names)
	}
	if err := stranger.Delete(parentOf(t, key)+"/"+names[0], -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("unauthenticated delete of the lock node: %v, want zk.ErrNoAuth", err)
	}
	sc := newClient(t, stranger)
	if _, err := sc.TryObtain(context.Background(), key); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("unauthenticated TryObtain: %v, want zk.ErrNoAuth", err)
	}
	release(t, lease)
}
