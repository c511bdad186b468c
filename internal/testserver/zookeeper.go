package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/logtest"
	"github.com/go-zookeeper/zk"
)

// zkJars are the jars of Debian's zookeeper package (and its dependencies)
// that a standalone or quorum server needs, relative to /usr/share/java.
var zkJars = []string{
	"zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-nop.jar",
	"netty-handler.jar", "netty-common.jar", "netty-buffer.jar", "netty-transport.jar",
	"netty-codec.jar", "netty-resolver.jar", "netty-transport-native-epoll.jar",
	"netty-transport-native-unix-common.jar", "metrics-core.jar", "snappy-java.jar",
	"commons-io.jar", "commons-cli.jar",
}

const javaDir = "/usr/share/java"

// ZKTick is the servers' tickTime. Sessions may last from 2 to 150 ticks.
const ZKTick = 200 * time.Millisecond

func zkClasspath() (java, cp string, err error) {
	java, err = exec.LookPath("java")
	if err != nil {
		return "", "", fmt.Errorf("%w (java not on PATH)", ErrMissingBinary)
	}
	parts := make([]string, 0, len(zkJars))
	for _, j := range zkJars {
		p := filepath.Join(javaDir, j)
		if _, err := os.Stat(p); err != nil {
			if j == "zookeeper.jar" || j == "zookeeper-jute.jar" {
				return "", "", fmt.Errorf("%w (%s missing)", ErrMissingBinary, p)
			}
			continue // optional on some releases
		}
		parts = append(parts, p)
	}
	return java, strings.Join(parts, ":"), nil
}

// ZKNode is one ZooKeeper server process. Its methods are safe for concurrent use.
type ZKNode struct {
	id       int
	port     int
	dir      string
	proc     *process
	ensemble bool
}

// Addr returns the node's client address.
func (n *ZKNode) Addr() string { return addr(n.port) }

// PID returns the JVM's process ID, or 0 before it has started.
func (n *ZKNode) PID() int { return n.proc.pid() }

// Running reports whether the node's process is alive.
func (n *ZKNode) Running() bool { return n.proc.running() }

// Kill stops the node with SIGKILL and waits until it has exited.
func (n *ZKNode) Kill() { n.proc.kill() }

// Pause stops the JVM with SIGSTOP.
func (n *ZKNode) Pause() error { return n.proc.signal(syscall.SIGSTOP) }

// Resume continues a paused JVM.
func (n *ZKNode) Resume() error { return n.proc.signal(syscall.SIGCONT) }

// Restart kills the node (if alive) and starts it again with its data, then
// waits until it serves clients (in an ensemble: until it has rejoined the
// quorum, which needs a majority of nodes alive).
func (n *ZKNode) Restart() error {
	n.Kill()
	return n.start()
}

func (n *ZKNode) start() error {
	if err := n.proc.start(); err != nil {
		return err
	}
	return waitFor(n.proc, 60*time.Second, n.serving)
}

// serving asks the srvr four-letter word; ZooKeeper answers ruok before it
// serves sessions, but srvr reports Mode: only once it does.
func (n *ZKNode) serving() error {
	out, err := fourLetter(n.Addr(), "srvr")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "Mode:") {
		return fmt.Errorf("srvr: %q", strings.TrimSpace(out))
	}
	return nil
}

// Mode returns the node's role as srvr reports it: standalone, leader or follower.
func (n *ZKNode) Mode() (string, error) {
	out, err := fourLetter(n.Addr(), "srvr")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(l, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("testserver: no Mode in srvr output %q", out)
}

// WatchedPaths returns the paths this node holds data watches on (the wchp
// four-letter word), so that a test can wait until a client watches a node
// before it deletes that node.
func (n *ZKNode) WatchedPaths() ([]string, error) {
	out, err := fourLetter(n.Addr(), "wchp")
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "/") {
			paths = append(paths, strings.TrimSpace(l))
		}
	}
	return paths, nil
}

func fourLetter(a, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", a, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(c))
	return string(b), err
}

func (n *ZKNode) close(keepLog bool) {
	n.proc.kill()
	if keepLog {
		removeKeepingLogs(n.dir)
	} else {
		os.RemoveAll(n.dir)
	}
}

// ZooKeeper is a standalone server or an ensemble of nodes on loopback.
type ZooKeeper struct {
	nodes []*ZKNode
	// peers[[2]int{i, j}] are the proxies through which node i reaches node
	// j's quorum and election ports (ZKEnsembleOptions.PeerProxies); nil
	// otherwise. Read-only after the start.
	peers map[[2]int][2]*Proxy

	mu    sync.Mutex // protects conns
	conns []*ZKConn
}

// ZKEnsembleOptions configures NewZooKeeperEnsembleWith. The zero value
// gives what NewZooKeeperEnsemble starts.
type ZKEnsembleOptions struct {
	// SyncLimit is zoo.cfg's syncLimit, in ticks (ZKTick): how long a
	// follower cut off from its leader goes on serving its clients (reads,
	// pings) before it gives up on the leader, and how long the leader waits
	// for it. Default: 10 (2 s).
	SyncLimit int
	// PeerProxies routes the traffic of every node to every other node
	// (quorum and election ports) through a Proxy per direction, so that
	// PartitionPeers and Isolate can cut nodes off from each other while
	// their clients still reach them. Default: false, direct links.
	PeerProxies bool
}

// NewZooKeeper starts one standalone ZooKeeper server. The caller must Close it.
func NewZooKeeper() (*ZooKeeper, error) { return newZK(1) }

// NewZooKeeperEnsemble starts an ensemble of n (odd, ≥ 3) nodes and waits
// until each serves clients. The caller must Close it.
func NewZooKeeperEnsemble(n int) (*ZooKeeper, error) {
	if n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("testserver: ensemble size %d: need an odd number ≥ 3", n)
	}
	return newZK(n)
}

// StartZooKeeper is NewZooKeeper for tests.
func StartZooKeeper(tb testing.TB) *ZooKeeper {
	tb.Helper()
	z, err := NewZooKeeper()
	return must(tb, z, err)
}

// StartZooKeeperEnsemble is NewZooKeeperEnsemble for tests.
func StartZooKeeperEnsemble(tb testing.TB, n int) *ZooKeeper {
	tb.Helper()
	z, err := NewZooKeeperEnsemble(n)
	return must(tb, z, err)
}

// NewZooKeeperEnsembleWith is NewZooKeeperEnsemble with options.
func NewZooKeeperEnsembleWith(n int, o ZKEnsembleOptions) (*ZooKeeper, error) {
	if n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("testserver: ensemble size %d: need an odd number ≥ 3", n)
	}
	if o.SyncLimit < 0 {
		return nil, fmt.Errorf("testserver: negative syncLimit %d", o.SyncLimit)
	}
	return newZKWith(n, o)
}

// StartZooKeeperEnsembleWith is NewZooKeeperEnsembleWith for tests.
func StartZooKeeperEnsembleWith(tb testing.TB, n int, o ZKEnsembleOptions) *ZooKeeper {
	tb.Helper()
	z, err := NewZooKeeperEnsembleWith(n, o)
	return must(tb, z, err)
}

func newZK(n int) (*ZooKeeper, error) { return newZKWith(n, ZKEnsembleOptions{}) }

// newZKWith starts the ensemble, again on fresh ports if a node exits
// during start-up: a free port can be taken by another process (another
// test package's server) before the node binds it, and each node needs
// three. The other servers' starts retry the same way.
//
// A node that fails to start leaves its zookeeper.log, which the error
// names and quotes the end of; a retried attempt's logs are removed.
func newZKWith(n int, o ZKEnsembleOptions) (*ZooKeeper, error) {
	for attempt := 0; ; attempt++ {
		z, err := newZKOnce(n, o)
		if err == nil {
			return z, nil
		}
		if attempt == 4 || !errors.Is(err, errExited) {
			return nil, err
		}
		if z != nil {
			z.removeDirs()
		}
	}
}

// newZKOnce starts the ensemble once. When a node does not start it
// returns the error and the closed ensemble, whose directories keep their
// logs.
func newZKOnce(n int, o ZKEnsembleOptions) (*ZooKeeper, error) {
	java, cp, err := zkClasspath()
	if err != nil {
		return nil, err
	}
	if o.SyncLimit == 0 {
		o.SyncLimit = 10
	}
	z := &ZooKeeper{}
	ports := make([]int, 3*n) // client, peer, election port per node
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
	var servers strings.Builder
	if n > 1 {
		for i := range n {
			fmt.Fprintf(&servers, "server.%d=127.0.0.1:%d:%d\n", i+1, ports[3*i+1], ports[3*i+2])
		}
	}
	if o.PeerProxies && n > 1 {
		z.peers = map[[2]int][2]*Proxy{}
		for i := range n {
			for j := range n {
				if i == j {
					continue
				}
				var pair [2]*Proxy
				for k := range pair {
					p, err := NewProxy(addr(ports[3*j+1+k]))
					if err != nil {
						z.Close()
						return nil, err
					}
					pair[k] = p
				}
				z.peers[[2]int{i, j}] = pair
			}
		}
	}
	for i := range n {
		servers := servers.String()
		if z.peers != nil {
			// Node i binds its own ports and reaches the others through
			// its proxies (each node reads only its own zoo.cfg).
			var b strings.Builder
			for j := range n {
				q, e := ports[3*j+1], ports[3*j+2]
				if j != i {
					pair := z.peers[[2]int{i, j}]
					q, e = proxyPort(pair[0]), proxyPort(pair[1])
				}
				fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", j+1, q, e)
			}
			servers = b.String()
		}
		dir, err := tempDir("zk")
		if err != nil {
			z.Close()
			return nil, err
		}
		node := &ZKNode{id: i + 1, port: ports[3*i], dir: dir, ensemble: n > 1}
		z.nodes = append(z.nodes, node)
		cfg := fmt.Sprintf(`tickTime=%d
initLimit=20
syncLimit=%d
minSessionTimeout=%d
maxSessionTimeout=30000
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
electionPortBindRetry=5
%s`, ZKTick.Milliseconds(), o.SyncLimit, 2*ZKTick.Milliseconds(), dir, node.port, servers)
		if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
			z.Close()
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			z.Close()
			return nil, err
		}
		node.proc = &process{
			name: fmt.Sprintf("zookeeper#%d :%d", i+1, node.port), bin: java, dir: dir,
			log: filepath.Join(dir, "zookeeper.log"),
			args: []string{
				"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
				"-Dzookeeper.4lw.commands.whitelist=*", "-Dzookeeper.admin.enableServer=false",
				"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(dir, "zoo.cfg"),
			},
		}
	}
	// Start every JVM first, then wait: an ensemble node serves only once a
	// quorum is up.
	for _, node := range z.nodes {
		if err := node.proc.start(); err != nil {
			z.Close()
			return nil, err
		}
	}
	for _, node := range z.nodes {
		if err := waitFor(node.proc, 60*time.Second, node.serving); err != nil {
			z.closeKeepingLogs()
			return z, err
		}
	}
	return z, nil
}

// closeKeepingLogs is Close after a failed start: every node is killed and
// its directory removed but for its log, which the start's error names.
func (z *ZooKeeper) closeKeepingLogs() { z.close(true) }

// removeDirs removes what closeKeepingLogs kept.
func (z *ZooKeeper) removeDirs() {
	for _, n := range z.nodes {
		os.RemoveAll(n.dir)
	}
}

func proxyPort(p *Proxy) int {
	_, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	return n
}

// PartitionPeers black-holes (on) or restores (off) the links between
// nodes a and b (indexes into Nodes), both ways; their clients still reach
// them. Restoring also cuts the stalled connections, which the nodes then
// make again. It needs ZKEnsembleOptions.PeerProxies.
func (z *ZooKeeper) PartitionPeers(a, b int, on bool) error {
	ab, ok1 := z.peers[[2]int{a, b}]
	ba, ok2 := z.peers[[2]int{b, a}]
	if !ok1 || !ok2 {
		return fmt.Errorf("testserver: no peer proxies between nodes %d and %d (ZKEnsembleOptions.PeerProxies)", a, b)
	}
	for _, p := range []*Proxy{ab[0], ab[1], ba[0], ba[1]} {
		p.SetBlackhole(on)
		if !on {
			p.Cut()
		}
	}
	return nil
}

// Isolate partitions node i (an index into Nodes) from every other node, or
// restores its links (see PartitionPeers).
func (z *ZooKeeper) Isolate(i int, on bool) error {
	for j := range z.nodes {
		if j != i {
			if err := z.PartitionPeers(i, j, on); err != nil {
				return err
			}
		}
	}
	return nil
}

// Nodes returns the servers (one when standalone).
func (z *ZooKeeper) Nodes() []*ZKNode { return z.nodes }

// Servers returns the client addresses of every node, for zk.Connect.
func (z *ZooKeeper) Servers() []string {
	s := make([]string, len(z.nodes))
	for i, n := range z.nodes {
		s[i] = n.Addr()
	}
	return s
}

// Close closes every connection made by Dial and kills every node. It is idempotent.
func (z *ZooKeeper) Close() { z.close(false) }

func (z *ZooKeeper) close(keepLogs bool) {
	z.mu.Lock()
	conns := z.conns
	z.conns = nil
	z.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	for _, n := range z.nodes {
		n.close(keepLogs)
	}
	for _, pair := range z.peers {
		pair[0].Close()
		pair[1].Close()
	}
}

// ZKConn is a ZooKeeper client connection whose traffic to every node runs
// through a Proxy, so a test can partition it and expire its session.
type ZKConn struct {
	*zk.Conn
	proxies []*Proxy
	timeout time.Duration

	mu      sync.Mutex // protects expired
	expired chan struct{}
	once    sync.Once
}

// Dial connects to the ensemble through one Proxy per node, asking for the
// given session timeout (the server bounds it to [2 ticks, 30 s]). onEvent,
// if not nil, is called with every event of the connection (go-zookeeper's
// event callback, run on its event goroutine).
func (z *ZooKeeper) Dial(sessionTimeout time.Duration, onEvent func(zk.Event)) (*ZKConn, error) {
	return z.dial(z.nodes, sessionTimeout, onEvent, quietLogger{})
}

// DialNode is Dial to node i (an index into Nodes) alone: the connection
// never moves to another node, even when that one stops serving.
func (z *ZooKeeper) DialNode(i int, sessionTimeout time.Duration, onEvent func(zk.Event)) (*ZKConn, error) {
	if i < 0 || i >= len(z.nodes) {
		return nil, fmt.Errorf("testserver: no node %d (%d nodes)", i, len(z.nodes))
	}
	return z.dial(z.nodes[i:i+1], sessionTimeout, onEvent, quietLogger{})
}

// DialNodeT is DialNode for tests: the connection is closed when the test
// ends, and go-zookeeper's lines about it go to tb's output (DialT).
func (z *ZooKeeper) DialNodeT(tb testing.TB, i int, sessionTimeout time.Duration, onEvent func(zk.Event)) *ZKConn {
	tb.Helper()
	if i < 0 || i >= len(z.nodes) {
		tb.Fatalf("testserver: no node %d (%d nodes)", i, len(z.nodes))
	}
	logtest.Capture(tb)
	c, err := z.dial(z.nodes[i:i+1], sessionTimeout, onEvent, logtest.Logger("zk: "))
	return must(tb, c, err)
}

// dial connects through a proxy per node; log gets go-zookeeper's lines.
func (z *ZooKeeper) dial(nodes []*ZKNode, sessionTimeout time.Duration, onEvent func(zk.Event), log zk.Logger) (*ZKConn, error) {
	c := &ZKConn{timeout: sessionTimeout, expired: make(chan struct{})}
	var addrs []string
	for _, n := range nodes {
		p, err := NewProxy(n.Addr())
		if err != nil {
			c.closeProxies()
			return nil, err
		}
		c.proxies = append(c.proxies, p)
		addrs = append(addrs, p.Addr())
	}
	cb := func(ev zk.Event) {
		if ev.Type == zk.EventSession && ev.State == zk.StateExpired {
			c.mu.Lock()
			select {
			case <-c.expired:
			default:
				close(c.expired)
			}
			c.mu.Unlock()
		}
		if onEvent != nil {
			onEvent(ev)
		}
	}
	conn, events, err := zk.Connect(addrs, sessionTimeout,
		zk.WithLogInfo(false), zk.WithLogger(log), zk.WithEventCallback(cb))
	if err != nil {
		c.closeProxies()
		return nil, err
	}
	c.Conn = conn
	// Drain the event channel so it never fills; the callback sees everything.
	go func() {
		for range events {
		}
	}()
	if err := c.waitConnected(10 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	z.mu.Lock()
	z.conns = append(z.conns, c)
	z.mu.Unlock()
	return c, nil
}

// DialT is Dial for tests: the connection is closed when the test ends,
// and go-zookeeper's lines about it (reconnections, the ends of its loops)
// go to tb's output, shown when tb fails; Dial's connections log nothing.
func (z *ZooKeeper) DialT(tb testing.TB, sessionTimeout time.Duration, onEvent func(zk.Event)) *ZKConn {
	tb.Helper()
	logtest.Capture(tb)
	c, err := z.dial(z.nodes, sessionTimeout, onEvent, logtest.Logger("zk: "))
	return must(tb, c, err)
}

func (c *ZKConn) waitConnected(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for c.Conn.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			return fmt.Errorf("testserver: no ZooKeeper session after %v (state %v)", timeout, c.Conn.State())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// Proxies returns the per-node proxies, for faults of a test's own design.
func (c *ZKConn) Proxies() []*Proxy { return c.proxies }

// Partition black-holes (on) or restores (off) the connection to every node.
func (c *ZKConn) Partition(on bool) {
	for _, p := range c.proxies {
		p.SetBlackhole(on)
	}
}

// Expire makes the server expire this connection's session for real: it
// partitions the client from every node for longer than the session timeout,
// then cuts the stalled connections and lets it reconnect, and waits until
// the client has seen StateExpired. go-zookeeper then opens a new session.
func (c *ZKConn) Expire() error {
	c.Partition(true)
	// The server expires a session within its negotiated timeout (the
	// request clamped to [2 ticks, 30 s]) plus a tick or two.
	time.Sleep(min(max(c.timeout, 2*ZKTick), 30*time.Second) + 3*ZKTick)
	for _, p := range c.proxies {
		p.Cut()
	}
	c.Partition(false)
	c.mu.Lock()
	expired := c.expired
	c.mu.Unlock()
	select {
	case <-expired:
		c.mu.Lock()
		c.expired = make(chan struct{}) // ready for a later Expire
		c.mu.Unlock()
		return nil
	case <-time.After(c.timeout + 10*time.Second):
		return fmt.Errorf("testserver: session was not reported expired")
	}
}

func (c *ZKConn) closeProxies() {
	for _, p := range c.proxies {
		p.Close()
	}
}

// Close closes the ZooKeeper connection and its proxies. It is idempotent.
func (c *ZKConn) Close() {
	c.once.Do(func() {
		if c.Conn != nil {
			c.Conn.Close()
		}
		c.closeProxies()
	})
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}
