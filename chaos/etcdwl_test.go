package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestEtcdLeader: the nemesis finds the member that leads; once it is
// killed, another member leads and is found; the heal starts the killed
// member again from its data directory and waits until every member
// serves.
func TestEtcdLeader(t *testing.T) {
	e := &env{etcd: testserver.StartEtcdCluster(t, 3)}
	t.Cleanup(e.etcd.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	i, err := e.etcdLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for j, n := range e.etcd.Nodes() {
		if lead, err := etcdLeads(ctx, n.Addr()); err != nil || lead != (j == i) {
			t.Fatalf("member %d: leads %v (%v); etcdLeader said member %d", j, lead, err, i)
		}
	}
	old := e.etcd.Nodes()[i]
	old.Kill()
	j, err := e.etcdLeader(ctx)
	if err != nil {
		t.Fatalf("after the leader's kill: %v", err)
	}
	if j == i {
		t.Fatalf("the killed member %d still found as the leader", i)
	}
	if err := healEtcd(e.etcd); err != nil {
		t.Fatal(err)
	}
	if !old.Running() {
		t.Fatal("the heal did not start the killed member")
	}
	for _, n := range e.etcd.Nodes() {
		if err := n.Healthy(); err != nil {
			t.Fatalf("%s after the heal: %v", n.Name(), err)
		}
	}
}

// TestEtcdKeyDelete: etcd-key-delete deletes every hold key under the
// lock prefix and records, per key, the token of the hold it wiped (the
// first key under the key's prefix), not a waiter's; the holder learns of
// it at Release (lock.ErrNotHeld), and the waiter starts again and holds
// on a new key, with a larger token.
func TestEtcdKeyDelete(t *testing.T) {
	e := &env{etcd: testserver.StartEtcdCluster(t, 3)}
	t.Cleanup(e.etcd.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func() lock.Locker {
		l, closeFn, err := dialEtcd(clientConfig{addrs: e.etcd.Endpoints(), ttl: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeFn)
		return l
	}
	a, w := dial(), dial()
	held, err := a.Obtain(ctx, "k0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan lock.Lease, 1)
	go func() {
		l, err := w.Obtain(ctx, "k0")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // w's key is made, second in line
	target, detail, rounds, err := e.deleteHoldKeys(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 1 || rounds[0].Unknown || len(rounds[0].Wiped) != 1 || rounds[0].Wiped["k0"] != held.Token() || rounds[0].End < rounds[0].Start {
		t.Errorf("rounds %+v (%s, %s), want one that wiped k0's token %d (the holder's only)", rounds, target, detail, held.Token())
	}
	if !strings.Contains(detail, "2 hold keys deleted in 1 rounds") {
		t.Errorf("detail %q, want the holder's and the waiter's keys deleted", detail)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= held.Token() {
		t.Errorf("the waiter holds with token %d, not above the wiped hold's %d", l.Token(), held.Token())
	}
	if err := held.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("the deleted hold's release: %v, want lock.ErrNotHeld", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("the waiter's release: %v", err)
	}

	// A round whose request failed is settled by its marker: applied
	// (the marker there: what the prefix held just before is what it
	// deleted), or not (the marker put first, the round's condition
	// fails from then on).
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, etcdLockPrefix+"/k1/x-1", "o"); err != nil {
		t.Fatal(err)
	}
	marker := etcdNemesisPrefix + "/test-applied"
	if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(marker), "=", 0)).
		Then(clientv3.OpDelete(etcdLockPrefix+"/", clientv3.WithPrefix()), clientv3.OpPut(marker, "")).Commit(); err != nil {
		t.Fatal(err)
	}
	applied, kvs, err := settleRound(ctx, cli, marker)
	if err != nil || !applied || len(kvs) != 1 || string(kvs[0].Key) != etcdLockPrefix+"/k1/x-1" {
		t.Errorf("settling an applied round: applied %v, held %v, %v; want the one key it deleted", applied, kvs, err)
	}
	applied, _, err = settleRound(ctx, cli, etcdNemesisPrefix+"/test-lost")
	if err != nil || applied {
		t.Errorf("settling a round never applied: applied %v, %v", applied, err)
	}
}
