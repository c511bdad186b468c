package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Etcd timing: the members' raft heartbeat and election timeout. etcd's
// shortest lease is 1.5 election timeouts rounded up to a second, so with
// these a lease of 1 s is granted as asked (the defaults, 100 ms and 1 s,
// make it 2 s).
const (
	EtcdHeartbeat       = 50 * time.Millisecond
	EtcdElectionTimeout = 500 * time.Millisecond
)

// etcdBinary finds Debian's etcd server (package etcd-server, /usr/bin/etcd)
// or returns an error naming the command that installs it.
func etcdBinary() (string, error) {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w (etcd not on PATH; apt-get install -y etcd-server)", ErrMissingBinary)
}

// EtcdNode is one etcd member. Its methods are safe for concurrent use.
type EtcdNode struct {
	name       string
	clientPort int
	peerPort   int
	dir        string
	proc       *process
	// peer (in a cluster) is the proxy in front of the member's peer
	// port: the address it advertises to the others, so that
	// IsolateMember can partition it.
	peer *Proxy
}

// peerURL is the peer URL the member advertises.
func (n *EtcdNode) peerURL() string {
	if n.peer != nil {
		return "http://" + n.peer.Addr()
	}
	return "http://" + addr(n.peerPort)
}

// Addr returns the member's client address, "127.0.0.1:port", the same
// across restarts.
func (n *EtcdNode) Addr() string { return addr(n.clientPort) }

// Name returns the member's name (etcd's --name): "etcd1", "etcd2", ….
func (n *EtcdNode) Name() string { return n.name }

// PID returns the member's process ID, or 0 before it has started.
func (n *EtcdNode) PID() int { return n.proc.pid() }

// Running reports whether the member's process is alive (it may be paused).
func (n *EtcdNode) Running() bool { return n.proc.running() }

// Kill stops the member with SIGKILL and waits until it has exited. Killing
// a dead member does nothing.
func (n *EtcdNode) Kill() { n.proc.kill() }

// Pause stops the member with SIGSTOP: its connections stay open, nothing
// answers, and (in a cluster) it stops heart-beating its peers.
func (n *EtcdNode) Pause() error { return n.proc.signal(syscall.SIGSTOP) }

// Resume continues a paused member with SIGCONT.
func (n *EtcdNode) Resume() error { return n.proc.signal(syscall.SIGCONT) }

// Restart kills the member (if alive) and starts it again on the same ports
// from its data directory (its keys, leases and raft log survive), then
// waits until it reports itself healthy: in a cluster, that needs a
// majority of members alive.
func (n *EtcdNode) Restart() error {
	n.Kill()
	return n.start()
}

// Start starts a killed member again from its data directory (see
// Restart); it does nothing if the member runs.
func (n *EtcdNode) Start() error {
	if n.proc.running() {
		return nil
	}
	return n.start()
}

func (n *EtcdNode) start() error {
	if err := n.proc.start(); err != nil {
		return err
	}
	return waitFor(n.proc, 30*time.Second, n.healthy)
}

// healthy asks the member's /health endpoint, which answers
// {"health":"true"} once the member has a leader and serves requests.
func (n *EtcdNode) healthy() error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + n.Addr() + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	var h struct{ Health string }
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("/health: %q: %w", b, err)
	}
	if h.Health != "true" {
		return fmt.Errorf("/health: %s", strings.TrimSpace(string(b)))
	}
	return nil
}

// Healthy reports nil once the member serves requests (it has a leader),
// or the reason it does not.
func (n *EtcdNode) Healthy() error { return n.healthy() }

// Etcd is a single etcd member, or a cluster of members, on loopback. The
// tests start it themselves: never the etcd service that Debian's package
// installs. Its methods are safe for concurrent use.
type Etcd struct {
	nodes []*EtcdNode
}

// NewEtcd starts one etcd member on free loopback ports in a new temporary
// directory and waits until it is healthy. The caller must Close it.
func NewEtcd() (*Etcd, error) { return newEtcd(1) }

// NewEtcdCluster starts n (odd, ≥ 3) members that form one cluster, and
// waits until each is healthy. The caller must Close it.
func NewEtcdCluster(n int) (*Etcd, error) {
	if n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("testserver: etcd cluster size %d: need an odd number ≥ 3", n)
	}
	return newEtcd(n)
}

// StartEtcd is NewEtcd for tests.
func StartEtcd(tb testing.TB) *Etcd {
	tb.Helper()
	e, err := NewEtcd()
	return must(tb, e, err)
}

// StartEtcdCluster is NewEtcdCluster for tests.
func StartEtcdCluster(tb testing.TB, n int) *Etcd {
	tb.Helper()
	e, err := NewEtcdCluster(n)
	return must(tb, e, err)
}

// newEtcd starts the members, again on fresh ports if one exits during
// start-up (a port taken meanwhile by another test package's server).
func newEtcd(n int) (*Etcd, error) {
	for attempt := 0; ; attempt++ {
		e, err := newEtcdOnce(n)
		if err == nil {
			return e, nil
		}
		if attempt == 4 || !errors.Is(err, errExited) {
			return nil, err
		}
		if e != nil {
			for _, node := range e.nodes {
				os.RemoveAll(node.dir)
			}
		}
	}
}

// newEtcdOnce starts the members once. When one does not start it returns
// the error and the closed cluster, whose directories keep their logs.
func newEtcdOnce(n int) (*Etcd, error) {
	bin, err := etcdBinary()
	if err != nil {
		return nil, err
	}
	ports := make([]int, 2*n) // client, peer port per member
	seen := map[int]bool{}
	for i := range ports {
		for {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			if !seen[p] {
				seen[p] = true
				ports[i] = p
				break
			}
		}
	}
	e := &Etcd{}
	for i := range n {
		e.nodes = append(e.nodes, &EtcdNode{name: fmt.Sprintf("etcd%d", i+1), clientPort: ports[2*i], peerPort: ports[2*i+1]})
	}
	if n > 1 {
		for _, node := range e.nodes {
			if node.peer, err = NewProxy(addr(node.peerPort)); err != nil {
				e.Close()
				return nil, err
			}
			node.peer.SetLabeler(etcdPeerLabel)
		}
	}
	var initial []string
	for _, node := range e.nodes {
		initial = append(initial, node.name+"="+node.peerURL())
	}
	// The member's own flags only: an ETCD_* variable in the environment
	// would set a flag too (etcd reads them), as Debian's /etc/default/etcd
	// does for its service.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD") {
			env = append(env, kv)
		}
	}
	token := fmt.Sprintf("coordkit-%d-%d", os.Getpid(), time.Now().UnixNano())
	for _, node := range e.nodes {
		dir, err := tempDir("etcd")
		if err != nil {
			e.Close()
			return nil, err
		}
		node.dir = dir
		client, peer := "http://"+node.Addr(), "http://"+addr(node.peerPort)
		node.proc = &process{
			name: fmt.Sprintf("etcd %s :%d", node.name, node.clientPort), bin: bin, dir: dir, env: env,
			log: filepath.Join(dir, "etcd.log"),
			args: []string{
				"--name", node.name,
				"--data-dir", filepath.Join(dir, "data"),
				"--listen-client-urls", client, "--advertise-client-urls", client,
				"--listen-peer-urls", peer, "--initial-advertise-peer-urls", node.peerURL(),
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-state", "new", "--initial-cluster-token", token,
				"--heartbeat-interval", strconv.Itoa(int(EtcdHeartbeat.Milliseconds())),
				"--election-timeout", strconv.Itoa(int(EtcdElectionTimeout.Milliseconds())),
				"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
				"--enable-v2=false", "--enable-pprof=false",
			},
		}
	}
	// Start every member first, then wait: a member of a cluster is
	// healthy only once a quorum is up.
	for _, node := range e.nodes {
		if err := node.proc.start(); err != nil {
			e.Close()
			return nil, err
		}
	}
	for _, node := range e.nodes {
		if err := waitFor(node.proc, 30*time.Second, node.healthy); err != nil {
			e.close(true)
			return e, err
		}
	}
	return e, nil
}

// Nodes returns the members (one when single).
func (e *Etcd) Nodes() []*EtcdNode { return e.nodes }

// Endpoints returns every member's client address, for clientv3.Config.
func (e *Etcd) Endpoints() []string {
	s := make([]string, len(e.nodes))
	for i, n := range e.nodes {
		s[i] = n.Addr()
	}
	return s
}

// Proxies starts a Proxy in front of each member and returns them, in the
// order of Nodes; their Addr are the endpoints of a client that a test
// partitions. They are closed when the test ends.
func (e *Etcd) Proxies(tb testing.TB) []*Proxy {
	tb.Helper()
	ps := make([]*Proxy, len(e.nodes))
	for i, n := range e.nodes {
		ps[i] = StartProxy(tb, n.Addr())
	}
	return ps
}

// WaitHealthy waits until every running member is healthy, or ctx ends.
func (e *Etcd) WaitHealthy(ctx context.Context) error {
	for {
		var bad error
		for _, n := range e.nodes {
			if !n.Running() {
				continue
			}
			if err := n.healthy(); err != nil {
				bad = fmt.Errorf("testserver: %s: %w", n.name, err)
				break
			}
		}
		if bad == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(bad, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// RemoveMember removes member i from the cluster, as `etcdctl member
// remove` does (through another running member's gRPC gateway: POST
// /v3/cluster/member/remove), and waits until its process has exited: etcd
// stops a member once it applies its own removal (after 10 s it is
// killed). The others go on as a cluster of one member fewer, whose
// quorum is a majority of the rest. The removed member's address stays in
// Endpoints (a client configured with it finds nothing there, as after a
// real removal) and its directory until Close; it cannot be started
// again.
func (e *Etcd) RemoveMember(i int) error {
	if i < 0 || i >= len(e.nodes) {
		return fmt.Errorf("testserver: etcd member %d of %d", i, len(e.nodes))
	}
	n := e.nodes[i]
	var via *EtcdNode
	for _, o := range e.nodes {
		if o != n && o.Running() {
			via = o
			break
		}
	}
	if via == nil {
		return fmt.Errorf("testserver: remove %s: no other member running", n.name)
	}
	var list struct {
		Members []struct {
			ID   string // a uint64, as the gateway writes it
			Name string
		}
	}
	if err := etcdGateway(via.Addr(), "cluster/member/list", struct{}{}, &list); err != nil {
		return fmt.Errorf("testserver: remove %s: member list: %w", n.name, err)
	}
	id := ""
	for _, m := range list.Members {
		if m.Name == n.name {
			id = m.ID
		}
	}
	if id == "" {
		return fmt.Errorf("testserver: remove %s: not a member (%+v)", n.name, list.Members)
	}
	uid, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return fmt.Errorf("testserver: remove %s: member ID %q: %w", n.name, id, err)
	}
	// etcd refuses ("unhealthy cluster") while the members that stay have
	// not all been connected to each other for 5 s (its strict
	// reconfiguration check): a cluster just started, or a member just
	// back.
	for deadline := time.Now().Add(20 * time.Second); ; {
		var out map[string]any
		err := etcdGateway(via.Addr(), "cluster/member/remove", map[string]uint64{"ID": uid}, &out)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") || time.Now().After(deadline) {
			return fmt.Errorf("testserver: remove %s: %w", n.name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); n.Running() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	n.Kill() // if it has not stopped by itself
	return nil
}

// etcdGateway posts in (as JSON) to a member's gRPC gateway, /v3/<path>,
// and decodes the answer into out.
func etcdGateway(addr, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post("http://"+addr+"/v3/"+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/v3/%s: %s: %s", path, resp.Status, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, out)
}

// Close kills every member and removes its directory. It is idempotent.
func (e *Etcd) Close() { e.close(false) }

func (e *Etcd) close(keepLogs bool) {
	for _, n := range e.nodes {
		if n.proc != nil {
			n.proc.kill()
		}
		if n.peer != nil {
			n.peer.Close()
		}
		if n.dir == "" {
			continue
		}
		if keepLogs {
			removeKeepingLogs(n.dir)
		} else {
			os.RemoveAll(n.dir)
		}
	}
}

// IsolateMember partitions member i from the other members (on: true) or
// heals that partition (on: false): every byte between it and its peers is
// held, both ways, on the connections open and on new ones, while its
// clients still reach it. A cluster's members talk through a proxy in front
// of each one's peer port (the address each advertises); a member's own
// connections to the others are told apart by the peer URLs that etcd's
// peer transport sends with every request. An isolated leader keeps
// believing it leads until its election timeout passes without a quorum's
// answers; the others elect a new one.
func (e *Etcd) IsolateMember(i int, on bool) error {
	if i < 0 || i >= len(e.nodes) || e.nodes[i].peer == nil {
		return fmt.Errorf("testserver: isolate etcd member %d of %d: not a cluster member", i, len(e.nodes))
	}
	n := e.nodes[i]
	n.peer.SetBlackhole(on) // what the others send it
	for _, o := range e.nodes {
		if o != n {
			o.peer.SetIsolated(n.peerURL(), on) // what it sends them
		}
	}
	return nil
}

// etcdPeerLabel names an etcd peer connection's source: the sender's peer
// URLs, which etcd's peer transport (rafthttp) sends in the X-PeerURLs
// header of its stream and pipeline requests; "" without one.
func etcdPeerLabel(first []byte) string {
	const h = "\r\nx-peerurls:"
	i := bytes.Index(bytes.ToLower(first), []byte(h))
	if i < 0 {
		return ""
	}
	v := first[i+len(h):]
	if j := bytes.Index(v, []byte("\r\n")); j >= 0 {
		v = v[:j]
	}
	u, _, _ := strings.Cut(strings.TrimSpace(string(v)), ",")
	return u
}
