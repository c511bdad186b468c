package etcdlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/internal/contract"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestRWContract runs the read-write lock's checks (contract.RunRW: readers
// share, a writer excludes everyone, re-entry, a writer's read, ErrUpgrade,
// no writer starvation, exclusion under load) against etcdlock.Client.
func TestRWContract(t *testing.T) {
	contract.RunRW(t, contract.RWBackend{
		Name: "etcdlock.Client",
		Open: func(t *testing.T) lock.RWLocker {
			c, err := etcdlock.New(dial(t, server.Endpoints()...), etcdlock.WithPrefix("/contract"), etcdlock.WithTTL(ttl), withTestLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		},
	})
}

// watchLog records the keys an etcd client watches.
type watchLog struct {
	clientv3.Watcher
	mu   sync.Mutex // protects keys
	keys []string
}

func (w *watchLog) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w.mu.Lock()
	w.keys = append(w.keys, key)
	w.mu.Unlock()
	return w.Watcher.Watch(ctx, key, opts...)
}

func (w *watchLog) watched() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.keys)
}

// watching returns a Client whose etcd client's watches are logged.
func watching(t *testing.T) (*etcdlock.Client, *watchLog) {
	cli := dial(t, server.Endpoints()...)
	w := &watchLog{Watcher: cli.Watcher}
	cli.Watcher = w
	return newClient(t, cli), w
}

// rwKeys returns the hold keys of key's read-write lock, in create
// revision order.
func rwKeys(t *testing.T, cli *clientv3.Client, key string) []string {
	t.Helper()
	resp, err := cli.Get(ctxFor(t, 5*time.Second), prefix(t)+".rw/"+key+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, kv := range resp.Kvs {
		ks = append(ks, string(kv.Key))
	}
	return ks
}

// waitKeys waits until key's read-write lock has n hold keys.
func waitKeys(t *testing.T, cli *clientv3.Client, key string, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if ks := rwKeys(t, cli, key); len(ks) == n {
			return ks
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d hold keys in 5 s, want %d: %v", len(rwKeys(t, cli, key)), n, rwKeys(t, cli, key))
		}
	}
}

// TestRWNoHerd: three readers queue behind a writer, and a second writer
// behind them. Each reader watches the writer's key only; the second
// writer watches the last reader's key only, and is not woken by the
// release of the others: one watch in all until it holds. Tokens grow in
// queue order.
func TestRWNoHerd(t *testing.T) {
	cli := dial(t, server.Endpoints()...)
	ctx := ctxFor(t, 20*time.Second)
	key := "herd"
	w1 := obtain(t, newClient(t, cli).Write(), ctx, key)
	var readers []<-chan result
	var logs []*watchLog
	for i := range 3 {
		c, log := watching(t)
		logs = append(logs, log)
		readers = append(readers, obtainAsync(ctx, c.Read(), key))
		waitKeys(t, cli, key, i+2)
	}
	wc, wlog := watching(t)
	w2ch := obtainAsync(ctx, wc.Write(), key)
	ks := waitKeys(t, cli, key, 5)
	for deadline := time.Now().Add(5 * time.Second); len(wlog.watched()) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second writer set no watch in 5 s")
		}
	}
	for i, log := range logs {
		for deadline := time.Now().Add(5 * time.Second); len(log.watched()) == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("reader %d set no watch in 5 s", i)
			}
		}
		if got := log.watched(); !slices.Equal(got, ks[:1]) {
			t.Fatalf("reader %d watched %v, want the writer's key %s only", i, got, ks[0])
		}
	}
	if got := wlog.watched(); !slices.Equal(got, ks[3:4]) {
		t.Fatalf("the second writer watched %v, want the last reader's key %s only", got, ks[3])
	}
	release(t, w1)
	var rs []lock.Lease
	for i, ch := range readers {
		r := await(t, ch, 5*time.Second)
		if r.err != nil {
			t.Fatalf("reader %d: %v", i, r.err)
		}
		if r.lease.Token() <= w1.Token() {
			t.Fatalf("reader %d's token %d not above the writer's %d", i, r.lease.Token(), w1.Token())
		}
		rs = append(rs, r.lease)
	}
	release(t, rs[0])
	release(t, rs[1])
	select {
	case r := <-w2ch:
		t.Fatalf("the second writer got in beside a reader: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if got := wlog.watched(); len(got) != 1 {
		t.Fatalf("the second writer watched %v: woken by the release of readers it does not wait for", got)
	}
	release(t, rs[2])
	r := await(t, w2ch, 5*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lease.Token() <= rs[2].Token() {
		t.Fatalf("second writer's token %d not above the last reader's %d", r.lease.Token(), rs[2].Token())
	}
	if got := wlog.watched(); len(got) != 1 {
		t.Fatalf("the second writer watched %v, want one watch", got)
	}
	release(t, r.lease)
	if ks := rwKeys(t, cli, key); len(ks) != 0 {
		t.Fatalf("hold keys left: %v", ks)
	}
}

// TestRWWriterKeepsRead: an owner that holds the write side and takes the
// read side keeps the key exclusive until it has released both; while it
// holds only that read, asking for the write side is an upgrade
// (ErrUpgrade) and the read side re-enters. The mutex of the same key is
// another lock. Two owners of one Client read at once.
func TestRWWriterKeepsRead(t *testing.T) {
	cli := dial(t, server.Endpoints()...)
	c, other := newClient(t, cli), newClient(t, cli)
	ctx := ctxFor(t, 10*time.Second)
	actx := lock.WithOwner(ctx, "a")
	key := "downgrade"
	w := obtain(t, c.Write(), actx, key)
	r := obtain(t, c.Read(), actx, key)
	if r.Token() != w.Token() {
		t.Fatalf("the writer's read has token %d, want the write's %d", r.Token(), w.Token())
	}
	m := obtain(t, other, ctx, key) // the mutex: not the read-write lock
	release(t, m)
	release(t, w)
	if _, err := other.Read().TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("another reader while the writer's read is held: %v, want lock.ErrNotObtained", err)
	}
	if _, err := c.Write().TryObtain(actx, key); !errors.Is(err, lock.ErrUpgrade) || !errors.Is(err, etcdlock.ErrUpgrade) {
		t.Fatalf("write after the write's release, read held: %v, want ErrUpgrade", err)
	}
	r2, err := c.Read().TryObtain(actx, key)
	if err != nil || r2.Token() != w.Token() {
		t.Fatalf("read re-entry: %v, token %d", err, r2.Token())
	}
	release(t, r2)
	release(t, r)
	if err := r.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release: %v, want lock.ErrNotHeld", err)
	}
	w2, err := other.Write().TryObtain(ctx, key)
	if err != nil {
		t.Fatalf("writer after both sides were released: %v", err)
	}
	if w2.Token() <= w.Token() {
		t.Fatalf("token %d not above %d", w2.Token(), w.Token())
	}
	release(t, w2)
	// Two owners of one Client read at once, each with a key of its own.
	r1 := obtain(t, c.Read(), lock.WithOwner(ctx, "r1"), key)
	r2, err = c.Read().TryObtain(lock.WithOwner(ctx, "r2"), key)
	if err != nil {
		t.Fatalf("a second owner's read on the same Client: %v", err)
	}
	if ks := rwKeys(t, cli, key); len(ks) != 2 || r2.Token() <= r1.Token() {
		t.Fatalf("two readers of one Client: keys %v, tokens %d, %d", ks, r1.Token(), r2.Token())
	}
	release(t, r1)
	release(t, r2)
}

// TestRWLoss: a reader's lease revoked (etcdctl lease revoke) is reported
// lost while the other reader keeps its hold; a writer's link to etcd cut
// is reported lost before a waiting reader on another Client holds.
func TestRWLoss(t *testing.T) {
	t.Parallel() // it mostly waits on timers
	t.Run("reader revoked", func(t *testing.T) {
		t.Parallel()
		cli := dial(t, server.Endpoints()...)
		a, b, wc := newClient(t, cli), newClient(t, cli), newClient(t, cli)
		ctx := ctxFor(t, 10*time.Second)
		key := "revoked"
		ra := obtain(t, a.Read(), ctx, key)
		rb := obtain(t, b.Read(), ctx, key)
		wch := obtainAsync(ctx, wc.Write(), key)
		waitKeys(t, cli, key, 3)
		resp, err := cli.Get(ctx, rwKeys(t, cli, key)[0])
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("reader's key: %v", err)
		}
		if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
			t.Fatal(err)
		}
		wantLost(t, ra, ttl, etcdlock.ErrLeaseLost)
		if closed(rb.Lost()) {
			t.Fatal("the other reader's lease reported lost")
		}
		select {
		case r := <-wch:
			t.Fatalf("the writer got in beside a reader: %v", r.err)
		case <-time.After(100 * time.Millisecond):
		}
		release(t, rb)
		r := await(t, wch, 5*time.Second)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.lease.Token() <= rb.Token() {
			t.Fatalf("writer's token %d not above the reader's %d", r.lease.Token(), rb.Token())
		}
		release(t, r.lease)
		if err := ra.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Release of the revoked read: %v, want lock.ErrNotHeld", err)
		}
	})
	t.Run("writer cut off", func(t *testing.T) {
		t.Parallel()
		proxy := testserver.StartProxy(t, server.Nodes()[0].Addr())
		holder := newClient(t, dial(t, proxy.Addr()))
		next := newClient(t, dial(t, server.Endpoints()...))
		ctx := ctxFor(t, 20*time.Second)
		key := "cut"
		w := obtain(t, holder.Write(), ctx, key)
		ch := obtainAfter(ctx, next.Read(), key, w)
		time.Sleep(ttl / 3) // keep-alives answered
		cut := time.Now()
		proxy.SetBlackhole(true)
		r := await(t, ch, 3*ttl)
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer release(t, r.lease)
		t.Logf("reader in %v after the cut (TTL %v)", r.at.Sub(cut).Round(time.Millisecond), ttl)
		if !r.prevLost {
			t.Fatal("a reader holds while the writer's lease is not reported lost")
		}
		if err := lock.LostCause(w); !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, etcdlock.ErrLeaseLost) {
			t.Fatalf("LostCause: %v, want lock.ErrLockLost and ErrLeaseLost", err)
		}
		if r.lease.Token() <= w.Token() {
			t.Fatalf("reader's token %d not above the writer's %d", r.lease.Token(), w.Token())
		}
	})
}

// TestRWBadInput: both sides refuse the keys and TTLs Obtain refuses, with
// the same errors (matching lock.ErrInvalid), before any I/O.
func TestRWBadInput(t *testing.T) {
	c := newClient(t, dial(t, server.Endpoints()...))
	ctx := ctxFor(t, 5*time.Second)
	for _, side := range []lock.Locker{c.Read(), c.Write()} {
		for _, key := range []string{"", "a/b", strings.Repeat("k", etcdlock.MaxKeyLen+1)} {
			if _, err := side.Obtain(ctx, key); !errors.Is(err, etcdlock.ErrInvalidKey) || !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("Obtain(%.10q): %v, want ErrInvalidKey", key, err)
			}
			if _, err := side.TryObtain(ctx, key); !errors.Is(err, etcdlock.ErrInvalidKey) {
				t.Errorf("TryObtain(%.10q): %v, want ErrInvalidKey", key, err)
			}
		}
		if _, err := side.Obtain(ctx, "k", lock.WithTTL(-time.Second)); !errors.Is(err, etcdlock.ErrInvalidTTL) {
			t.Errorf("Obtain with lock.WithTTL(-1s): %v, want ErrInvalidTTL", err)
		}
	}
	if ks := rwKeys(t, dial(t, server.Endpoints()...), "k"); len(ks) != 0 {
		t.Fatalf("keys made: %v", ks)
	}
}
