package testserver_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
)

// etcdCall posts one request to etcd's JSON gateway (/v3/...), which the
// root module uses here instead of etcd's client (kept out of its module
// graph), and decodes the reply into out.
func etcdCall(addr, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Post("http://"+addr+"/v3/"+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

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
