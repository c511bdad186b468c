package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sqlServer is what MariaDB and Postgres share: one server process on a
// fixed loopback port and data directory.
type sqlServer struct {
	port  int
	dir   string // removed by Close
	proc  *process
	ready func() error // answers nil once the server serves clients
	// forks: the server forks a process per connection (PostgreSQL's
	// backends, each in a session of its own). Kill, Pause and Resume
	// signal the PID started and its children (found by parent PID in
	// /proc), never a process found by name.
	forks bool
}

// Addr returns "127.0.0.1:port". The port stays the same across restarts.
func (s *sqlServer) Addr() string { return addr(s.port) }

// Port returns the server's TCP port.
func (s *sqlServer) Port() int { return s.port }

// Dir returns the server's temporary directory (data directory inside).
func (s *sqlServer) Dir() string { return s.dir }

// PID returns the server's process ID, or 0 before it has started.
func (s *sqlServer) PID() int { return s.proc.pid() }

// Running reports whether the server process is alive (it may be paused).
func (s *sqlServer) Running() bool { return s.proc.running() }

// Kill stops the server with SIGKILL (no shutdown, no goodbye to clients:
// a crash) and waits until it has exited. Killing a dead server does
// nothing. The data stays: Start or Restart recovers it.
func (s *sqlServer) Kill() {
	if !s.forks {
		s.proc.kill()
		return
	}
	pid := s.proc.pid()
	var kids []int
	if pid != 0 && s.proc.running() {
		// Stop the parent first, so that it forks nothing while its
		// children are collected and killed.
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		kids = children(pid)
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
	}
	s.proc.kill()
	waitGone(kids, 10*time.Second)
}

// Pause stops the server with SIGSTOP: connections stay open, nothing
// answers (PostgreSQL: its backends too).
func (s *sqlServer) Pause() error {
	if err := s.proc.signal(syscall.SIGSTOP); err != nil || !s.forks {
		return err
	}
	kids := children(s.proc.pid())
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGSTOP)
	}
	for _, k := range kids {
		waitStopped(k, 2*time.Second)
	}
	return nil
}

// Resume continues a paused server with SIGCONT.
func (s *sqlServer) Resume() error {
	if s.forks && s.proc.running() {
		for _, k := range children(s.proc.pid()) {
			_ = syscall.Kill(k, syscall.SIGCONT)
		}
	}
	return s.proc.signal(syscall.SIGCONT)
}

// Start starts a killed server again on the same port and data directory
// (after crash recovery, with every committed write) and waits until it
// serves clients. Starting a running server does nothing.
func (s *sqlServer) Start() error {
	if s.proc.running() {
		return nil
	}
	return s.start()
}

// Restart kills the server (a crash, as Kill) and starts it again with its
// data on the same port.
func (s *sqlServer) Restart() error {
	s.Kill()
	return s.start()
}

func (s *sqlServer) start() error {
	if err := s.proc.start(); err != nil {
		return err
	}
	return waitFor(s.proc, 60*time.Second, s.ready)
}

// Close kills the server and removes its directory. It is idempotent.
func (s *sqlServer) Close() {
	s.Kill()
	os.RemoveAll(s.dir)
}

// waitGone waits until none of pids is alive (gone, or a zombie), at most
// timeout.
func waitGone(pids []int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, p := range pids {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// procStat returns the state and parent PID of pid from /proc/pid/stat.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parens.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0], ppid, err == nil
}

func alive(pid int) bool {
	st, _, ok := procStat(pid)
	return ok && st != "Z" && st != "X"
}

// children returns the live child processes of pid, from /proc.
func children(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range ents {
		k, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, pp, ok := procStat(k); ok && pp == pid && st != "Z" && st != "X" {
			kids = append(kids, k)
		}
	}
	return kids
}

// serverUser is the user a server that refuses root runs as: nil when this
// process is not root (the server runs as the current user), else nobody.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("testserver: running as root, and no user nobody to run the server as: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("testserver: user nobody: uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// chownTree gives dir and everything under it to cred's user (nothing when
// cred is nil).
func chownTree(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
}

// runAs runs a set-up command (initdb, mariadb-install-db) to completion,
// as cred's user when not nil, with its output in <dir>/<command>.log. On
// failure the error names that file and quotes its lines that report an
// error (else its last lines), not the advice these commands print after.
func runAs(cred *syscall.Credential, dir, bin string, args ...string) error {
	name := filepath.Base(bin)
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: cred}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("testserver: %s: %w (output in %s)\n%s", name, err, logPath, logSummary(logPath))
	}
	return nil
}

// logSummary returns the lines of the log at path that report an error
// (at most 10), or its last 10 lines when none does.
func logSummary(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var errs []string
	for _, l := range lines {
		if u := strings.ToUpper(l); strings.Contains(u, "ERROR") || strings.Contains(u, "FATAL") {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 {
		errs = lines
	}
	return strings.Join(errs[max(0, len(errs)-10):], "\n")
}

// removeKeepingLogs removes a server's directory after it failed to start,
// all but its *.log files, which the error names.
func removeKeepingLogs(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".log") {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// findBinary looks name up on PATH, then in the versioned directories of
// dirsGlob (highest version first), e.g. /usr/lib/postgresql/*/bin, where
// Debian installs PostgreSQL's server binaries off PATH.
func findBinary(name, dirsGlob, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if dirsGlob != "" {
		dirs, _ := filepath.Glob(dirsGlob)
		sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
		for _, d := range dirs {
			p := filepath.Join(d, name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w (%s not found; apt-get install -y %s)", ErrMissingBinary, name, pkg)
}

// versionOf extracts the first number in path (15 of /usr/lib/postgresql/15/bin).
func versionOf(path string) int {
	for _, part := range strings.Split(path, "/") {
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
}
