package testserver

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// InstallHint is the command that installs every binary this package needs on
// a Debian machine.
const InstallHint = "apt-get update && apt-get install -y redis-server redis-sentinel zookeeper mariadb-server postgresql etcd-server (or: make deps)"

// ErrMissingBinary is returned when a server binary or jar is not installed.
var ErrMissingBinary = errors.New("testserver: server binary not installed; install with: " + InstallHint)

// process is one child process. Its methods are safe for concurrent use.
type process struct {
	name string
	bin  string
	args []string
	dir  string
	log  string
	cred *syscall.Credential // run as this user; nil: as this process's
	env  []string            // the environment; nil: this process's

	mu   sync.Mutex // protects cmd and done
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited and been reaped
}

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("testserver: %s already running (pid %d)", p.name, p.cmd.Process.Pid)
		}
	}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.dir
	cmd.Env = p.env
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Pdeathsig: the kernel kills the server if the test binary dies first.
	// Setpgid: a ^C in the terminal reaches the test, not the servers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: p.cred}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("testserver: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// running reports whether the process was started and has not exited.
func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("testserver: %s not started", p.name)
	}
	select {
	case <-p.done:
		return fmt.Errorf("testserver: %s (pid %d) has exited", p.name, p.cmd.Process.Pid)
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	if sig == syscall.SIGSTOP {
		waitStopped(p.cmd.Process.Pid, 2*time.Second)
	}
	return nil
}

// waitStopped waits, at most d, until every thread of pid is stopped
// (state T in /proc/<pid>/task/*/stat). kill(2) returns before a stop
// signal has stopped every thread: a thread that was running could still
// answer a request sent right after Pause returned (a paused MariaDB once
// answered a query within 300 ms in a CI run). Without /proc, or once pid
// is gone, it returns at once.
func waitStopped(pid int, d time.Duration) {
	for end := time.Now().Add(d); !allStopped(pid) && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
}

// allStopped reports whether no thread of pid runs: each one stopped (T,
// t), or exiting (Z, X).
func allStopped(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			continue // the thread exited meanwhile
		}
		// "tid (comm) S ...": the state follows the last ')' (comm may hold one).
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		switch b[i+2] {
		case 'T', 't', 'Z', 'X':
		default:
			return false
		}
	}
	return true
}

// kill sends SIGKILL to the process by its PID and waits until it is reaped.
// Killing a process that already exited is not an error.
// waitExit waits up to d for the process to exit by itself (a server told
// to shut down) and reports whether it did.
func (p *process) waitExit(d time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func (p *process) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// logTail returns the last lines of the process's log, for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// Ports. A server restarted after a kill needs its port back (its
// clients hold the address), and a port the kernel chose (":0") is in the
// ephemeral range, where any outgoing connection of any process may take
// it while the server is down: make test-stress saw MariaDB's restart fail
// with "Address already in use". So freePort draws ports below the
// ephemeral range, which the kernel never hands out on its own, and
// reserves each for the life of the test process with an exclusive flock on
// a file named after it in a directory every test process shares (the lock
// goes with the process, however it ends), so that no other test process
// draws it either.
var ports struct {
	sync.Mutex
	held map[int]*os.File // the lock files of the ports this process drew
}

// portRange is the range freePort draws from: 20000-32767, moved below the
// ephemeral range when a machine's range starts lower
// (net.ipv4.ip_local_port_range).
func portRange() (lo, hi int) {
	lo, hi = 20000, 32767
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	var elo, ehi int
	if _, err := fmt.Sscan(string(b), &elo, &ehi); err != nil {
		return lo, hi
	}
	switch {
	case elo > hi:
	case elo > 12000: // below the range: 10000 ports at most, 2000 at least
		lo, hi = max(1024, elo-10000), elo-1
	default: // the range starts low: above it
		lo, hi = ehi+1, min(65535, ehi+10000)
	}
	return lo, hi
}

// freePort returns a TCP port on 127.0.0.1 that is free and reserved for
// this process (see ports).
func freePort() (int, error) {
	dir := filepath.Join(os.TempDir(), "coordkit-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, err
	}
	lo, hi := portRange()
	ports.Lock()
	defer ports.Unlock()
	if ports.held == nil {
		ports.held = map[int]*os.File{}
	}
	for range 500 {
		port := lo + rand.IntN(hi-lo+1)
		if ports.held[port] != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close() // another test process has it
			continue
		}
		ln, err := net.Listen("tcp", addr(port))
		if err != nil {
			f.Close() // taken by something else; closing drops the lock
			continue
		}
		ln.Close()
		ports.held[port] = f
		return port, nil
	}
	return 0, fmt.Errorf("testserver: no free port in %d-%d after 500 draws", lo, hi)
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// tempDir makes a fresh directory for one server.
func tempDir(prefix string) (string, error) {
	return os.MkdirTemp("", "coordkit-"+prefix+"-")
}

// clearDir removes everything inside dir but keeps dir and keepers.
func clearDir(dir string, keep ...string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
outer:
	for _, e := range ents {
		for _, k := range keep {
			if e.Name() == k {
				continue outer
			}
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// errExited is what waitFor's error wraps when the process exited before it
// was ready (a port taken meanwhile, among other causes).
var errExited = errors.New("exited during start-up")

// waitFor polls ready every 20 ms until it returns nil, the process exits,
// or timeout passes.
func waitFor(p *process, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		if last = ready(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testserver: %s not ready after %v: %v (log: %s)\n%s", p.name, timeout, last, p.log, p.logTail())
		}
		select {
		case <-p.exited():
			return fmt.Errorf("testserver: %s %w: %v (log: %s)\n%s", p.name, errExited, last, p.log, p.logTail())
		case <-t.C:
		}
	}
}
