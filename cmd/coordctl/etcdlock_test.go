package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/etcd/etcdworker"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestLockEtcd: lock inspect --kind etcd shows the holder and the waiter
// of an etcdlock lock, with their owners, leases and tokens, and the
// holder's lease's TTL; lock release --kind etcd --force deletes the
// holder's key, the waiter holds, and the former holder's Release says
// lock.ErrNotHeld.
func TestLockEtcd(t *testing.T) {
	e := testserver.StartEtcd(t)
	ctx := context.Background()
	newClient := func() *etcdlock.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		c, err := etcdlock.New(cli, etcdlock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); cli.Close() })
		return c
	}
	holder, waiter := newClient(), newClient()
	lease, err := holder.Obtain(lock.WithOwner(ctx, "owner-e"), "batch-7")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan lock.Lease, 1)
	wctx, cancel := context.WithTimeout(lock.WithOwner(ctx, "owner-w"), 30*time.Second)
	defer cancel()
	go func() {
		l, err := waiter.Obtain(wctx, "batch-7")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	env := map[string]string{"COORDKIT_ETCD": strings.Join(e.Endpoints(), ",")}
	var v etcdView
	waitFor(t, 5*time.Second, "the waiter's key is not there", func() bool {
		_, out, _ := runCLI(t, env, "lock", "inspect", "batch-7", "--kind", "etcd", "--json")
		return json.Unmarshal([]byte(out), &v) == nil && len(v.Waiters) == 1
	})
	if !v.Held || v.Holder.Owner != "owner-e" || v.Holder.Token != lease.Token() || v.Waiters[0].Owner != "owner-w" ||
		v.Waiters[0].Token <= lease.Token() || v.Holder.Lease == v.Waiters[0].Lease || v.TTLms <= 0 || v.TTLms > 5000 ||
		!strings.HasPrefix(v.Holder.Path, etcdlock.DefaultPrefix+"/batch-7/") {
		t.Fatalf("inspect --json: %+v", v)
	}
	code, out, errOut := runCLI(t, env, "lock", "inspect", "batch-7", "--kind", "etcd")
	if code != exitOK {
		t.Fatalf("%d %q", code, errOut)
	}
	golden(t, "inspect_etcd", mask(maskSpaces(out), `(lease )[0-9a-f]+`, "${1}LEASE", `(?m)^(\d+ \S+ \S+ )[0-9a-f]+ `, "${1}LEASE ",
		`(token )\d+`, "${1}N", `(?m) \d+$`, " N", `(ttl: )\S+`, "${1}TTL"))

	code, out, _ = runCLI(t, env, "lock", "release", "batch-7", "--kind", "etcd", "--force")
	if code != exitOK || !strings.Contains(out, "released batch-7") || !strings.Contains(out, "owner owner-e") {
		t.Fatalf("release: %d %q", code, out)
	}
	var next lock.Lease
	select {
	case next = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
	if owner, tok, err := holder.Holder(ctx, "batch-7"); err != nil || owner != "owner-w" || tok != next.Token() {
		t.Fatalf("holder after release: %q %d %v", owner, tok, err)
	}
	if err := lease.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("the former holder's Release: %v", err)
	}
	next.Release(ctx)
	if code, out, _ := runCLI(t, env, "lock", "inspect", "batch-7", "--kind", "etcd"); code != exitOK || !strings.Contains(out, "state:   free") {
		t.Fatalf("after release: %d %q", code, out)
	}
	if code, out, _ := runCLI(t, env, "lock", "release", "batch-7", "--kind", "etcd", "--force"); code != exitOK || !strings.Contains(out, "batch-7 was not held") {
		t.Fatalf("release of a free lock: %d %q", code, out)
	}
}

// TestPageEtcdLocks: serve with an etcd cluster lists its etcdlock locks
// on the page and in /api/status: the holder with its lease and token,
// the waiter, the lease's TTL; a released lock leaves the list.
func TestPageEtcdLocks(t *testing.T) {
	r := testserver.StartRedis(t)
	e := testserver.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx := context.Background()
	newClient := func() *etcdlock.Client {
		c, err := etcdlock.New(cli, etcdlock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, waiter := newClient(), newClient()
	held, err := holder.Obtain(lock.WithOwner(ctx, "owner-page"), "report")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(lock.WithOwner(ctx, "owner-next"), 30*time.Second)
	defer cancel()
	got := make(chan lock.Lease, 1)
	go func() {
		l, err := waiter.Obtain(wctx, "report")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	_, hs := startServer(t, r, serverConfig{etcd: cli})
	var st status
	waitFor(t, 5*time.Second, "the waiter is not listed", func() bool {
		code, body := get(t, hs.URL+"/api/status", false)
		return code == 200 && json.Unmarshal([]byte(body), &st) == nil && st.EtcdLocks != nil &&
			len(st.EtcdLocks.Locks) == 1 && len(st.EtcdLocks.Locks[0].Waiters) == 1
	})
	if l := st.EtcdLocks.Locks[0]; st.EtcdLocks.Prefix != etcdlock.DefaultPrefix || l.Key != "report" || l.Holder.Owner != "owner-page" ||
		l.Holder.Token != held.Token() || l.Waiters[0].Owner != "owner-next" || l.TTLms <= 0 || l.TTLms > 5000 {
		t.Fatalf("/api/status etcd lock: %+v", l)
	}
	code, page := get(t, hs.URL+"/", false)
	if code != 200 || !strings.Contains(page, "etcd locks under <code>"+etcdlock.DefaultPrefix+"</code>") ||
		!strings.Contains(page, `data-key="report"`) || !strings.Contains(page, "owner-next") {
		t.Fatalf("page: %d, no etcd lock row", code)
	}
	held.Release(ctx)
	next := <-got
	next.Release(ctx)
	if code, body := get(t, hs.URL+"/api/status", false); code != 200 || json.Unmarshal([]byte(body), &st) != nil ||
		st.EtcdLocks == nil || len(st.EtcdLocks.Locks) != 0 {
		t.Fatalf("after release: %d %s", code, body)
	}
}

// TestWorkersEtcd: workers list --backend etcd lists the worker IDs an
// etcdworker.Leaser leased, with host, PID and the lease's TTL; --max
// restricts the range; a released ID leaves the list.
func TestWorkersEtcd(t *testing.T) {
	e := testserver.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	l, err := etcdworker.New(cli, etcdworker.WithHost("web-1"), etcdworker.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := l.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	env := map[string]string{"COORDKIT_ETCD": strings.Join(e.Endpoints(), ",")}
	code, out, errOut := runCLI(t, env, "workers", "list", "svc", "--backend", "etcd", "--json")
	var vs []workerView
	if code != exitOK || json.Unmarshal([]byte(out), &vs) != nil || len(vs) != 2 {
		t.Fatalf("workers list: %d %q %q", code, out, errOut)
	}
	for i, v := range vs {
		if v.ID != int64(i) || v.Host != "web-1" || v.PID != os.Getpid() || v.Owner == "" || v.TTLms <= 0 || v.TTLms > 5000 {
			t.Fatalf("worker %d: %+v", i, v)
		}
	}
	if code, out, _ := runCLI(t, env, "workers", "list", "svc", "--backend", "etcd", "--max", "0", "--json"); code != exitOK ||
		json.Unmarshal([]byte(out), &vs) != nil || len(vs) != 1 || vs[0].ID != a.ID() {
		t.Fatalf("workers list --max 0: %d %q", code, out)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runCLI(t, env, "workers", "list", "svc", "--backend", "etcd", "--json"); code != exitOK ||
		json.Unmarshal([]byte(out), &vs) != nil || len(vs) != 1 || vs[0].ID != b.ID() {
		t.Fatalf("workers list after a release: %d %q", code, out)
	}
}
