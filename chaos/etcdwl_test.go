package main

import (
	"context"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
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
