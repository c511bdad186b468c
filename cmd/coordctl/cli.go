package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks an error in the command line: exit status 2. With
// hint, the message is followed by where to read the command's flags.
type usageError struct {
	msg  string
	hint bool
}

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// env is how a command reads a run's surroundings.
type env struct {
	ctx    context.Context
	out    io.Writer
	errOut io.Writer
	getenv func(string) string
	now    func() time.Time
}

type command struct {
	name    string
	summary string
	run     func(e *env, args []string) error
}

// commands is filled by init functions of the command files, so that each
// file owns its commands.
var commands []command

func register(c command) { commands = append(commands, c) }

const topUsage = `coordkit's operator tool.

Usage:
  coordctl <command> [flags] [arguments]

Commands:
%s
Run "coordctl <command> --help" for a command's flags, "coordctl --version"
for the version. Commands that print state take --json.
Exit status: 0 success, 1 failure (e.g. a server is unreachable), 2 bad usage.
`

func printTop(w io.Writer) {
	var b strings.Builder
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-16s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, topUsage, b.String())
}

// version returns the module version coordctl was built from
// (runtime/debug.ReadBuildInfo), with the VCS revision when the build
// recorded one, or "devel".
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev != "" && v == "devel" {
		v += " (" + rev[:min(len(rev), 12)] + dirty + ")"
	}
	return v
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) int {
	return runEnv(&env{ctx: ctx, out: out, errOut: errOut, getenv: getenv, now: time.Now}, args)
}

// runEnv is run with the whole environment given (tests set the clock).
func runEnv(e *env, args []string) int {
	// go-redis logs dial failures and retries through a global logger, from
	// its own goroutines; the commands report errors themselves (--verbose
	// shows go-redis's lines). Those goroutines may outlive the command:
	// stderr is shared through a lock and closed to them when it ends.
	redis.SetLogger(quietRedis{})
	lw := &lockedWriter{w: e.errOut}
	defer func() {
		redis.SetLogger(quietRedis{})
		lw.close()
	}()
	e.errOut = lw
	out, errOut := e.out, e.errOut
	if len(args) == 0 {
		printTop(errOut)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "--help", "-help":
		printTop(out)
		return exitOK
	case "version", "--version", "-version":
		fmt.Fprintf(out, "coordctl %s\n", version())
		return exitOK
	}
	// Commands have one or two words: "serve", "id decode".
	var cmd *command
	rest := args
	for i := range commands {
		c := &commands[i]
		words := strings.Fields(c.name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == c.name {
			if cmd == nil || len(words) > len(strings.Fields(cmd.name)) {
				cmd, rest = c, args[len(words):]
			}
		}
	}
	if cmd == nil {
		// A group word alone ("coordctl lock") lists its commands.
		var group []string
		for _, c := range commands {
			if strings.HasPrefix(c.name, args[0]+" ") {
				group = append(group, fmt.Sprintf("  coordctl %-16s %s", c.name, c.summary))
			}
		}
		if len(group) > 0 {
			fmt.Fprintf(errOut, "coordctl %s: a subcommand is needed:\n%s\n", args[0], strings.Join(group, "\n"))
			return exitUsage
		}
		// One line, as every other error: the usage is a -h away.
		fmt.Fprintf(errOut, "coordctl: unknown command %q\nRun \"coordctl -h\" for the commands.\n", args[0])
		return exitUsage
	}
	err := cmd.run(e, rest)
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(errOut, "coordctl %s: %v\n", cmd.name, err)
		if ue.hint {
			fmt.Fprintf(errOut, "Run \"coordctl %s -h\" for its flags.\n", cmd.name)
		}
		return exitUsage
	default:
		fmt.Fprintf(errOut, "coordctl %s: %v\n", cmd.name, err)
		return exitFailure
	}
}

// newFlags returns a flag set whose errors become usage errors and whose
// --help prints the command's usage to out (parse calls it: a bad flag
// prints one line and a hint, not the usage).
func newFlags(e *env, name, argsUsage, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("coordctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.out, "Usage: coordctl %s [flags] %s\n\n%s\n\nFlags:\n", name, argsUsage, about)
		fs.SetOutput(e.out)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses args (flags may follow positional arguments) and returns
// the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	// flag.FlagSet.Parse calls Usage on -h and on every error: keep it for
	// -h alone.
	usage := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = usage }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage()
				return nil, err
			}
			return nil, &usageError{msg: err.Error(), hint: true}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// addJSON adds --json to a command that prints state.
func addJSON(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print JSON instead of text (IDs above 2^53 as strings)")
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// conn holds the connection flags shared by commands that talk to servers.
type conn struct {
	redis    string
	master   string
	password string
	tls      bool
	zk       string
	etcd     string
	timeout  time.Duration
	verbose  bool
	logTo    io.Writer // where --verbose sends go-redis's log lines
}

func (c *conn) addRedis(fs *flag.FlagSet, e *env) {
	c.logTo = e.errOut
	if fs.Lookup("verbose") == nil {
		fs.BoolVar(&c.verbose, "verbose", false, "also print the Redis client's own log lines (dial failures, retries) on stderr")
	}
	fs.StringVar(&c.redis, "redis", envOr(e, "COORDKIT_REDIS", "127.0.0.1:6379"),
		"Redis address(es), comma-separated: one for a single node, several for a Cluster, the Sentinels' with --redis-master (env COORDKIT_REDIS)")
	fs.StringVar(&c.master, "redis-master", e.getenv("COORDKIT_REDIS_MASTER"),
		"Sentinel master name; --redis then lists the Sentinels (env COORDKIT_REDIS_MASTER)")
	fs.StringVar(&c.password, "redis-password", e.getenv("COORDKIT_REDIS_PASSWORD"),
		"Redis password (env COORDKIT_REDIS_PASSWORD)")
	tlsDefault, _ := strconv.ParseBool(e.getenv("COORDKIT_REDIS_TLS"))
	fs.BoolVar(&c.tls, "redis-tls", tlsDefault, "connect to Redis over TLS (env COORDKIT_REDIS_TLS)")
	c.addTimeout(fs)
}

func (c *conn) addZK(fs *flag.FlagSet, e *env) {
	fs.StringVar(&c.zk, "zk", envOr(e, "COORDKIT_ZK", "127.0.0.1:2181"),
		"ZooKeeper servers, comma-separated (env COORDKIT_ZK)")
	c.addTimeout(fs)
}

func (c *conn) addTimeout(fs *flag.FlagSet) {
	if fs.Lookup("timeout") == nil {
		fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "how long to wait for a server")
	}
}

func envOr(e *env, name, def string) string {
	if v := e.getenv(name); v != "" {
		return v
	}
	return def
}

// redisAddrs returns the --redis addresses, each checked to be host:port: a
// malformed one is a usage error.
func (c *conn) redisAddrs() ([]string, error) {
	addrs := splitList(c.redis)
	if len(addrs) == 0 {
		return nil, usagef("--redis is empty")
	}
	for _, a := range addrs {
		if err := checkAddr(a, true); err != nil {
			return nil, usagef("--redis %q: %v", a, err)
		}
	}
	return addrs, nil
}

// checkAddr reports why a is not host:port (or, unless needPort, a bare host).
func checkAddr(a string, needPort bool) error {
	if strings.Contains(a, "://") {
		return errors.New("want host:port, not a URL")
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		if needPort || strings.Contains(a, ":") {
			return errors.New("want host:port, such as 127.0.0.1:6379")
		}
		host = a
	} else {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
	}
	if strings.ContainsAny(host, "/ \t\r\n@?#") {
		return fmt.Errorf("host %q is not a host name or IP address (want host:port, not a URL)", host)
	}
	if !needPort && host == "" {
		return errors.New("empty host")
	}
	return nil
}

// logRedis routes go-redis's log lines to stderr with --verbose, and
// nowhere otherwise (runEnv silences them).
func (c *conn) logRedis() {
	if c.verbose && c.logTo != nil {
		redis.SetLogger(redisLines{w: c.logTo})
	}
}

// quietRedis is go-redis's logger when coordctl reports errors itself.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// redisLines writes go-redis's log lines ("redis: ...") to w (--verbose).
type redisLines struct{ w io.Writer }

// lockedWriter serialises writes to w, and drops them once closed.
type lockedWriter struct {
	mu     sync.Mutex // protects w's writes and closed
	w      io.Writer
	closed bool
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return len(p), nil
	}
	return l.w.Write(p)
}

func (l *lockedWriter) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

func (l redisLines) Printf(_ context.Context, format string, v ...any) {
	fmt.Fprintf(l.w, strings.TrimSuffix(format, "\n")+"\n", v...)
}

// redisClient connects and PINGs, so an unreachable server is reported as
// such before the command starts.
func (c *conn) redisClient(ctx context.Context) (redis.UniversalClient, error) {
	addrs, err := c.redisAddrs()
	if err != nil {
		return nil, err
	}
	c.logRedis()
	o := &redis.UniversalOptions{
		Addrs:       addrs,
		MasterName:  c.master,
		Password:    c.password,
		DialTimeout: c.timeout,
		ReadTimeout: c.timeout,
	}
	if c.tls {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	rdb := redis.NewUniversalClient(o)
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("the Redis server at %s is unreachable: %w", c.redis, err)
	}
	return rdb, nil
}

// zkConn connects and waits for a session, so an unreachable ensemble is
// reported as such.
func (c *conn) zkConn(ctx context.Context) (*zk.Conn, error) {
	servers, err := c.zkServers()
	if err != nil {
		return nil, err
	}
	zc, _, err := zk.Connect(servers, max(c.timeout, 4*time.Second), zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		return nil, fmt.Errorf("ZooKeeper at %s: %w", c.zk, err)
	}
	deadline := time.Now().Add(c.timeout)
	for zc.State() != zk.StateHasSession {
		if time.Now().After(deadline) || ctx.Err() != nil {
			zc.Close()
			return nil, fmt.Errorf("ZooKeeper at %s is unreachable (no session after %v)", c.zk, c.timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return zc, nil
}

// zkServers returns the --zk servers, each checked to be host[:port].
func (c *conn) zkServers() ([]string, error) {
	servers := splitList(c.zk)
	if len(servers) == 0 {
		return nil, usagef("--zk is empty")
	}
	for _, s := range servers {
		if err := checkAddr(s, false); err != nil {
			return nil, usagef("--zk %q: %v", s, err)
		}
	}
	return servers, nil
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
