package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/testserver"
)

// env is one run's servers and client processes.
type env struct {
	cfg      runConfig
	dir      string
	self     string // this binary, started as "chaos client"
	redis    []*testserver.Redis
	zk       *testserver.ZooKeeper
	etcd     *testserver.Etcd // etcd: the 3-member cluster (etcdwl.go)
	resource *testserver.Redis
	sql      *sqlServers // sql, sqlid: MariaDB and PostgreSQL (sqlwl.go)
	slots    []*slot
	faults   *faultLog
	nzk      int // a slot's first nzk proxies lead to ZooKeeper nodes

	zkCtl int64 // zk: the last seq written to the control nodes (zkctl.go); only the nemesis writes them

	wg sync.WaitGroup // the slots' wait goroutines
}

// slot is one client process position: a process killed there is replaced
// by the next generation, which reaches the servers through the same
// proxies (so the nemesis can cut or black-hole it).
type slot struct {
	i       int
	proxies []*testserver.Proxy
	ctl     string // ids: the control file (ids.go)
	clock   int64  // ids: the last seq written to ctl; only the nemesis writes it
	skew    int64  // ids: the clock offset (ns) of the slot when no clock step is on (contention mode)

	mu     sync.Mutex // protects gen, cmd, exited
	gen    int
	cmd    *exec.Cmd
	exited chan struct{}
}

func (s *slot) proc() string { return fmt.Sprintf("s%d.%d", s.i, s.gen) }

// newEnv starts the servers of cfg.backend and the protected resource.
func newEnv(cfg runConfig, dir string) (e *env, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	e = &env{cfg: cfg, dir: dir, self: self}
	defer func() {
		if err != nil {
			e.close()
			e = nil
		}
	}()
	if e.faults, err = newFaultLog(filepath.Join(dir, "faults.jsonl")); err != nil {
		return e, err
	}
	if hasResource(cfg.backend) { // the ID and bank workloads have none
		if e.resource, err = testserver.NewRedis(); err != nil {
			return e, err
		}
	}
	var targets []string
	switch cfg.backend {
	case "lock", "fair", "rw", "election", "sem":
		if e.redis, err = testserver.NewRedisMasters(1); err != nil {
			return e, err
		}
	case "sql", "sqlid", "bank":
		var opts []testserver.SQLOption
		if cfg.backend == "bank" { // XA needs prepared transactions, off by default
			opts = append(opts, testserver.WithServerArgs("-c", "max_prepared_transactions=64"))
		}
		if e.sql, err = newSQLServers(opts...); err != nil {
			return e, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		switch cfg.backend {
		case "sql":
			err = e.sql.createLockTables(ctx)
		case "sqlid":
			err = e.sql.createSQLIDTables(ctx)
		default:
			err = e.sql.createBankTables(ctx)
		}
		cancel()
		if err != nil {
			return e, err
		}
		targets = e.sql.addrs()
	case "redlock":
		if e.redis, err = testserver.NewRedisMasters(redlockMasters); err != nil {
			return e, err
		}
	case "zk":
		if e.zk, err = testserver.NewZooKeeperEnsemble(3); err != nil {
			return e, err
		}
		for _, n := range e.zk.Nodes() {
			targets = append(targets, n.Addr())
		}
	case "etcd":
		if e.etcd, err = testserver.NewEtcdCluster(3); err != nil {
			return e, err
		}
		targets = e.etcd.Endpoints() // a slot's proxies, one per member, in Nodes' order
	case "ids":
		// ZooKeeper first, Redis last: the client takes the last address as Redis.
		if e.zk, err = testserver.NewZooKeeperEnsemble(3); err != nil {
			return e, err
		}
		for _, n := range e.zk.Nodes() {
			targets = append(targets, n.Addr())
		}
		if e.redis, err = testserver.NewRedisMasters(1); err != nil {
			return e, err
		}
	default:
		return e, fmt.Errorf("unknown backend %q", cfg.backend)
	}
	for _, r := range e.redis {
		targets = append(targets, r.Addr())
	}
	if e.zk != nil {
		e.nzk = len(e.zk.Nodes())
	}
	skews := clockSkews(cfg)
	for i := range cfg.procs {
		s := &slot{i: i, ctl: filepath.Join(dir, fmt.Sprintf("ctl-s%d", i))}
		e.slots = append(e.slots, s)
		if skews != nil {
			s.skew = skews[i].Nanoseconds()
			if err := e.setClock(s, 0); err != nil {
				return e, err
			}
		}
		for _, t := range targets {
			p, err := testserver.NewProxy(t)
			if err != nil {
				return e, err
			}
			s.proxies = append(s.proxies, p)
		}
	}
	return e, nil
}

// spawn starts the next client process in s.
func (e *env) spawn(s *slot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	var addrs []string
	for _, p := range s.proxies {
		addrs = append(addrs, p.Addr())
	}
	if e.cfg.backend == "bank" {
		addrs = bankDSNs(e.sql.my, e.sql.pg, addrs[0], addrs[1])
	} else if e.sql != nil {
		addrs = sqlDSNs(e.sql.my, e.sql.pg, addrs[0], addrs[1])
	}
	proc := s.proc()
	logf, err := os.Create(filepath.Join(e.dir, "client-"+proc+".log"))
	if err != nil {
		return err
	}
	args := []string{"client",
		"-backend", e.cfg.backend, "-addrs", strings.Join(addrs, ","),
		"-keys", strconv.Itoa(e.cfg.keys),
		"-workers", strconv.Itoa(e.cfg.workers), "-ttl", e.cfg.ttl.String(),
		"-session", e.cfg.session.String(), "-proc", proc, "-owners", e.cfg.owners, "-hold", e.cfg.hold.String(),
		"-reenter", strconv.FormatFloat(e.cfg.reenter, 'g', -1, 64),
		"-long", strconv.FormatFloat(e.cfg.long, 'g', -1, 64), "-long-for", (2 * e.cfg.life()).String(),
		"-long-keys", formatKeyLives(e.cfg.keyLives()),
		"-out", filepath.Join(e.dir, "hist-"+proc+".jsonl"),
		"-seed", strconv.FormatUint(e.cfg.seed*1000+uint64(s.i*100+s.gen), 10)}
	if e.resource != nil {
		args = append(args, "-resource", e.resource.Addr())
	}
	if e.cfg.backend == "ids" {
		args = append(args, "-ctl", s.ctl, "-ids", filepath.Join(e.dir, "ids-"+proc+".bin"),
			"-rate", strconv.Itoa(e.cfg.idRate))
		if e.cfg.contend {
			args = append(args, "-idmax", strconv.Itoa(max(e.cfg.procs-2, 0)))
		}
	}
	if e.cfg.backend == "sqlid" {
		args = append(args, "-ids", filepath.Join(e.dir, "ids-"+proc+".bin"), "-rate", strconv.Itoa(e.cfg.idRate))
	}
	cmd := exec.Command(e.self, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	e.wg.Add(1)
	go func() { // owned by env: ends when the process has exited
		defer e.wg.Done()
		cmd.Wait()
		logf.Close()
		close(exited)
	}()
	return nil
}

// current returns s's running process and its exit channel.
func (s *slot) current() (*exec.Cmd, chan struct{}, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd, s.exited, s.proc()
}

// signal sends sig to s's current process, by its PID.
func (s *slot) signal(sig syscall.Signal) error {
	cmd, exited, _ := s.current()
	select {
	case <-exited:
		return fmt.Errorf("client %s has exited", s.proc())
	default:
	}
	return cmd.Process.Signal(sig)
}

// kill kills s's process with SIGKILL and waits until it has exited.
func (s *slot) kill() {
	cmd, exited, _ := s.current()
	cmd.Process.Signal(syscall.SIGCONT) // a paused process dies as well, but say so
	cmd.Process.Kill()
	<-exited
}

// stopClients ends every client: SIGCONT, SIGTERM, and SIGKILL after a grace period.
func (e *env) stopClients(grace time.Duration) {
	for _, s := range e.slots {
		cmd, exited, _ := s.current()
		if cmd == nil {
			continue
		}
		select {
		case <-exited:
			continue
		default:
		}
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for _, s := range e.slots {
		cmd, exited, _ := s.current()
		if cmd == nil {
			continue
		}
		select {
		case <-exited:
		case <-deadline.C:
			cmd.Process.Kill()
			<-exited
		}
	}
}

// heal undoes every fault the nemesis may have left: servers resumed and
// running, proxies passing, clients resumed.
func (e *env) heal() error {
	var errs []error
	for _, r := range e.redis {
		r.Resume()
		if err := r.Start(); err != nil {
			errs = append(errs, err)
		}
	}
	if e.zk != nil {
		for _, n := range e.zk.Nodes() {
			n.Resume()
			if !n.Running() {
				if err := n.Restart(); err != nil {
					errs = append(errs, err)
				}
			}
		}
		// A node resumed or restarted at the heal may still be electing a
		// leader or syncing with it: the faults have healed once every
		// node serves again, not before (no lock is granted without a
		// quorum; the liveness check counts from here).
		if err := zkServing(e.zk.Nodes(), zkHealWait); err != nil {
			errs = append(errs, err)
		}
	}
	if e.etcd != nil {
		if err := healEtcd(e.etcd); err != nil {
			errs = append(errs, err)
		}
	}
	if e.sql != nil {
		if err := e.sql.heal(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range e.slots {
		for _, p := range s.proxies {
			p.Reset()
		}
		if e.cfg.backend == "ids" {
			if err := e.setClock(s, 0); err != nil {
				errs = append(errs, err)
			}
		}
		if cmd, exited, _ := s.current(); cmd != nil {
			select {
			case <-exited:
			default:
				cmd.Process.Signal(syscall.SIGCONT)
			}
		}
	}
	return errors.Join(errs...)
}

// zkHealWait bounds the wait for the ensemble to serve again after the heal.
const zkHealWait = 30 * time.Second

// zkServing waits, up to d, until every node of nodes reports a Mode in
// srvr's answer (leader, follower or standalone), which ZooKeeper does only
// once it serves sessions.
func zkServing(nodes []*testserver.ZKNode, d time.Duration) error {
	deadline := time.Now().Add(d)
	for _, n := range nodes {
		for {
			_, err := n.Mode()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("zookeeper node %s not serving %v after the heal: %w", n.Addr(), d, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// close stops the clients and the servers and waits for every goroutine.
func (e *env) close() {
	e.stopClients(10 * time.Second)
	e.wg.Wait()
	for _, s := range e.slots {
		for _, p := range s.proxies {
			p.Close()
		}
	}
	for _, r := range e.redis {
		r.Close()
	}
	if e.zk != nil {
		e.zk.Close()
	}
	if e.etcd != nil {
		e.etcd.Close()
	}
	if e.resource != nil {
		e.resource.Close()
	}
	if e.sql != nil {
		e.sql.close()
	}
	if e.faults != nil {
		e.faults.Close()
	}
}

// Resource is what the protected resource holds at the end of a run.
type Resource struct {
	// Accepted lists, per key, the fenced writes accepted, in acceptance
	// order: the hold and its token.
	Accepted map[string][]AcceptedWrite `json:"accepted"`
	Counter  map[string]int64           `json:"counter"`
	// Lines (zk only) lists each key's lock nodes when the clients were
	// told to stop (zkstate.go): a stuck key's report names them.
	Lines map[string][]LockNode `json:"lines,omitempty"`
	// NoExpiry (lock, fair) lists the lock hashes the expiry audit saw
	// without an expiry (audit.go).
	NoExpiry []NoExpiry `json:"no_expiry,omitempty"`
	// Copies (redlock) lists the masters' copies of the long keys' holds
	// the renewal audit saw (audit.go).
	Copies []MasterCopy `json:"copies,omitempty"`
}

// AcceptedWrite is one fenced write the resource accepted.
type AcceptedWrite struct {
	Hold  string `json:"hold"`
	Token int64  `json:"tok"`
}

// dumpResource reads the resource's state for keys.
func dumpResource(ctx context.Context, addr string, keys []string) (*Resource, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	r := &Resource{Accepted: map[string][]AcceptedWrite{}, Counter: map[string]int64{}}
	for _, key := range keys {
		items, err := c.LRange(ctx, "log:{"+key+"}", 0, -1).Result()
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			hold, tok, ok := strings.Cut(it, " ")
			t, err := strconv.ParseInt(tok, 10, 64)
			if !ok || err != nil {
				return nil, fmt.Errorf("resource log %s: bad entry %q", key, it)
			}
			r.Accepted[key] = append(r.Accepted[key], AcceptedWrite{Hold: hold, Token: t})
		}
		v, err := c.Get(ctx, "ctr:{"+key+"}").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		r.Counter[key] = v
	}
	return r, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
