package testserver_test

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
)

// etcdCall posts one request to etcd's JSON gateway (/v3/...), which the
// root module uses here instead of etcd's client (kept out of its module
// graph), and decodes the reply into out.
var etcdCall = testserver.EtcdGateway

func etcdPut(addr, key, value string) error {
	var out map[string]any
	return etcdCall(addr, "kv/put", map[string]string{
		"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString([]byte(value)),
	}, &out)
}

func etcdGet(addr, key string) (string, error) {
	var out struct{ Kvs []struct{ Value string } }
	if err := etcdCall(addr, "kv/range", map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))}, &out); err != nil {
		return "", err
	}
	if len(out.Kvs) == 0 {
		return "", nil
	}
	v, err := base64.StdEncoding.DecodeString(out.Kvs[0].Value)
	return string(v), err
}

// TestEtcd: a single member serves, stops answering while paused, keeps
// its data across a kill and a restart on the same port.
func TestEtcd(t *testing.T) {
	e := testserver.StartEtcd(t)
	n := e.Nodes()[0]
	if err := etcdPut(n.Addr(), "k", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := n.Healthy(); err == nil {
		t.Error("a paused member reported itself healthy")
	}
	if err := n.Resume(); err != nil {
		t.Fatal(err)
	}
	pid := n.PID()
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	if n.PID() == pid || !n.Running() {
		t.Fatalf("restart: pid %d -> %d, running %v", pid, n.PID(), n.Running())
	}
	if v, err := etcdGet(n.Addr(), "k"); err != nil || v != "v1" {
		t.Fatalf("after restart: %q, %v; want v1", v, err)
	}
	n.Kill()
	if n.Running() {
		t.Fatal("running after Kill")
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	if v, err := etcdGet(n.Addr(), "k"); err != nil || v != "v1" {
		t.Fatalf("after kill and start: %q, %v; want v1", v, err)
	}
}

// TestEtcdCluster: three members form one cluster; with one killed the
// other two serve (a write on one is read on the other), and the killed
// one rejoins with the write.
func TestEtcdCluster(t *testing.T) {
	e := testserver.StartEtcdCluster(t, 3)
	ns := e.Nodes()
	ns[0].Kill()
	// If it led, the others elect a leader first.
	if err := e.WaitHealthy(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := etcdPut(ns[1].Addr(), "k", "v2"); err != nil {
		t.Fatal(err)
	}
	if v, err := etcdGet(ns[2].Addr(), "k"); err != nil || v != "v2" {
		t.Fatalf("read on another member: %q, %v; want v2", v, err)
	}
	if err := ns[0].Start(); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitHealthy(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if v, err := etcdGet(ns[0].Addr(), "k"); err != nil || v != "v2" {
		t.Fatalf("read on the restarted member: %q, %v; want v2", v, err)
	}
}

// TestEtcdRemoveMember: a member removed from a 3-member cluster stops; the
// other two serve writes and reads as a cluster of two, and a second
// removal of the same member is refused.
func TestEtcdRemoveMember(t *testing.T) {
	e := testserver.StartEtcdCluster(t, 3)
	ns := e.Nodes()
	if err := etcdPut(ns[0].Addr(), "k", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveMember(0); err != nil {
		t.Fatal(err)
	}
	if ns[0].Running() {
		t.Fatal("the removed member still runs")
	}
	if err := e.WaitHealthy(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := etcdPut(ns[1].Addr(), "k", "v2"); err != nil {
		t.Fatal(err)
	}
	if v, err := etcdGet(ns[2].Addr(), "k"); err != nil || v != "v2" {
		t.Fatalf("read on the other member: %q, %v; want v2", v, err)
	}
	var list struct{ Members []struct{ Name string } }
	if err := etcdCall(ns[1].Addr(), "cluster/member/list", map[string]string{}, &list); err != nil || len(list.Members) != 2 {
		t.Fatalf("members after the removal: %+v, %v; want 2", list.Members, err)
	}
	if err := e.RemoveMember(0); err == nil {
		t.Fatal("a second removal of the same member: nil error")
	}
}

// TestEtcdIsolateMember: the leader, partitioned from its peers, can no
// longer commit (a write through it fails) while the other two elect a
// leader and serve writes; healed, it catches up (a linearizable read
// through it returns the majority's write).
func TestEtcdIsolateMember(t *testing.T) {
	e := testserver.StartEtcdCluster(t, 3)
	ns := e.Nodes()
	leader := -1
	for deadline := time.Now().Add(20 * time.Second); leader < 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no member reports itself the leader")
		}
		for i, n := range ns {
			var st struct {
				Header struct {
					MemberID string `json:"member_id"`
				}
				Leader string
			}
			if err := etcdCall(n.Addr(), "maintenance/status", struct{}{}, &st); err == nil && st.Leader != "" && st.Leader == st.Header.MemberID {
				leader = i
			}
		}
	}
	if err := e.IsolateMember(leader, true); err != nil {
		t.Fatal(err)
	}
	other := ns[(leader+1)%len(ns)]
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err = etcdPut(other.Addr(), "k", "majority"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the majority did not serve a write within 20 s of the leader's isolation: %v", err)
		}
	}
	if err := etcdPut(ns[leader].Addr(), "k", "isolated"); err == nil {
		t.Fatal("a write through the isolated member succeeded")
	}
	if err := e.IsolateMember(leader, false); err != nil {
		t.Fatal(err)
	}
	var v string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if v, err = etcdGet(ns[leader].Addr(), "k"); err == nil && v == "majority" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read through the healed member: %q, %v; want the majority's write", v, err)
		}
	}
	if err := e.IsolateMember(len(ns), true); err == nil {
		t.Fatal("IsolateMember of a member that does not exist: no error")
	}
}
