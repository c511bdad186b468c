package redisfn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Mode is how a Runner runs the library's scripts.
type Mode int32

const (
	// Undecided: no call has reached the server yet (or every load so
	// far failed on the network).
	Undecided Mode = iota
	// Functions: FCALL of the loaded library.
	Functions
	// EvalSha: EVALSHA of each script (EVAL once after NOSCRIPT), where
	// FUNCTION is missing (Redis < 7), refused (ACLs, some managed
	// services), switched off (EnvVar), or where a library of this name
	// holds other code.
	EvalSha
)

func (m Mode) String() string {
	switch m {
	case Functions:
		return "functions"
	case EvalSha:
		return "evalsha"
	}
	return "undecided"
}

// EnvVar names the environment variable that, set to "off", makes every
// Runner use EVALSHA (for servers where loading a library is not wanted;
// make test runs the Redis suites both ways).
const EnvVar = "COORDKIT_REDIS_FUNCTIONS"

// Caller runs scripts and functions: a go-redis client (single node,
// Cluster, Sentinel), or internal/pipe's Pipeliner.
type Caller interface {
	redis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
}

// Runner runs the library's scripts for one client of coordkit (a
// lock.Client, a semaphore.Client, a redlock node): it chooses FCALL or
// EVALSHA once, at its first call, by loading the library on every node
// that serves keys (every master of a Cluster). After a failover to a
// node without the library, a FUNCTION FLUSH or a restart without data,
// the next FCALL gets "Function not found" (it did not run): the Runner
// loads the library on every master again and sends the call once more.
// It is safe for concurrent use.
type Runner struct {
	rdb  redis.UniversalClient
	log  *slog.Logger
	mode atomic.Int32
	// loads counts the loads that succeeded: a call that found the
	// function missing reloads only if none has since it was sent.
	loads atomic.Uint64
	bg    sync.WaitGroup // a decision in the background (Go)
	mu    sync.Mutex     // serialises the loads; protects the fields below
	why   string         // why the mode is EvalSha
	retry time.Time      // undecided after a failed load: no new try before then
}

// retryPause is how long an undecided Runner runs its calls by EVALSHA
// after a load that failed on the network or with a passing server error,
// before it tries to load again (the library is about 55 KB).
const retryPause = time.Second

// loadTimeout bounds a load that Go runs in the background.
const loadTimeout = 5 * time.Second

// NewRunner returns a Runner of rdb's servers; log (nil: none) gets one
// line when the server makes the Runner settle on EVALSHA, with the
// reason (none for EnvVar=off).
func NewRunner(rdb redis.UniversalClient, log *slog.Logger) *Runner {
	return &Runner{rdb: rdb, log: log}
}

// Mode returns how the Runner runs the scripts now.
func (r *Runner) Mode() Mode { return Mode(r.mode.Load()) }

// Why returns why the Runner uses EVALSHA, "" otherwise.
func (r *Runner) Why() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.why
}

// Run runs s with keys and args on c (rdb itself, or a Pipeliner of it),
// as FCALL or EVALSHA, and returns its answer.
func (r *Runner) Run(ctx context.Context, c Caller, s *Script, keys []string, args ...any) *redis.Cmd {
	if r.Mode() == Undecided && r.mu.TryLock() {
		// (Another call deciding: this one runs by EVALSHA rather than
		// wait for it; on a silent server every call would queue up.)
		r.decideLocked(ctx)
		r.mu.Unlock()
	}
	if r.Mode() != Functions {
		return s.eval.Run(ctx, c, keys, args...)
	}
	loads := r.loads.Load()
	cmd := c.FCall(ctx, s.name, keys, args...)
	if !r.Recover(ctx, cmd.Err(), loads) {
		return cmd
	}
	// It did not run: the library is loaded again, or FCALL was refused.
	return r.again(ctx, c, s, keys, args)
}

// again sends a call that did not run once more, after Recover: by FCALL,
// or by EVALSHA if the Runner has turned to it.
func (r *Runner) again(ctx context.Context, c Caller, s *Script, keys []string, args []any) *redis.Cmd {
	if r.Mode() != Functions {
		return s.eval.Run(ctx, c, keys, args...)
	}
	return c.FCall(ctx, s.name, keys, args...)
}

// Prepare chooses FCALL or EVALSHA now if no call has (for a caller that
// sends a script in a pipeline of its own, where Run cannot).
func (r *Runner) Prepare(ctx context.Context) {
	if r.Mode() == Undecided {
		r.mu.Lock()
		r.decideLocked(ctx)
		r.mu.Unlock()
	}
}

// Loads returns the count of loads that succeeded so far, for Recover.
func (r *Runner) Loads() uint64 { return r.loads.Load() }

// Recover is Run's handling of an FCALL's error for a caller that sent it
// itself (in a pipeline), loads being Loads() before it sent: it reports
// whether the call did not run and may be sent again, having loaded the
// library again ("Function not found") or turned the Runner to EVALSHA
// (FCALL refused).
func (r *Runner) Recover(ctx context.Context, err error, loads uint64) bool {
	switch {
	case err == nil:
		return false
	case missing(err):
		return r.reload(ctx, loads) == nil
	case refused(err):
		r.settle(EvalSha, fmt.Sprintf("FCALL refused: %v", err))
		return true
	}
	return false
}

func missing(err error) bool {
	return serverSays(err, "ERR Function not found")
}

// serverSays reports whether err is a Redis error reply that begins with
// prefix (case aside): the server's own words, which a script's error
// (whose text may carry key names) never begins with.
func serverSays(err error, prefix string) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return len(msg) >= len(prefix) && strings.EqualFold(msg[:len(prefix)], prefix)
}

// refused reports whether err is the server refusing FCALL itself (an
// unknown command, or an ACL without it; not one that refuses a key):
// nothing ran.
func refused(err error) bool {
	return serverSays(err, "ERR unknown command") ||
		serverSays(err, "NOPERM") && strings.Contains(strings.ToLower(err.Error()), "'fcall'")
}

// decideLocked loads the library and settles the mode, unless a call did
// before. r.mu must be held. A network error, or a server error that may
// pass (LOADING, BUSY, OOM, a Cluster changing), leaves the mode undecided:
// the calls run by EVALSHA, and the next one after retryPause tries again.
func (r *Runner) decideLocked(ctx context.Context) {
	if r.Mode() != Undecided || time.Now().Before(r.retry) {
		return
	}
	if v := os.Getenv(EnvVar); v == "off" {
		r.settleLocked(EvalSha, EnvVar+"=off")
		return
	}
	switch err := r.loadAll(ctx); {
	case err == nil:
		r.loads.Add(1)
		r.settleLocked(Functions, "")
	case decisive(err):
		r.settleLocked(EvalSha, err.Error())
	default:
		r.retry = time.Now().Add(retryPause)
	}
}

// Close waits for what Go started in the background: a decision (at most
// loadTimeout), or a call sent again after "Function not found". Close the
// AsyncCaller first: its answers may hand a call back. The Runner stays
// usable.
func (r *Runner) Close() { r.bg.Wait() }

// Reload loads the library on every master again (after "Function not
// found"). A server that now refuses it, or holds other code under its
// name, turns the Runner to EVALSHA.
func (r *Runner) Reload(ctx context.Context) error { return r.reload(ctx, r.loads.Load()) }

// reload is Reload unless a load succeeded since the caller read loads.
func (r *Runner) reload(ctx context.Context, loads uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loads.Load() != loads {
		return nil
	}
	err := r.loadAll(ctx)
	if err == nil {
		r.loads.Add(1)
	}
	if err != nil && decisive(err) {
		r.settleLocked(EvalSha, err.Error())
		return nil
	}
	return err
}

func (r *Runner) settle(m Mode, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settleLocked(m, why)
}

func (r *Runner) settleLocked(m Mode, why string) {
	if Mode(r.mode.Load()) == m {
		return
	}
	r.why = why
	r.mode.Store(int32(m))
	if m == EvalSha && r.log != nil && why != EnvVar+"=off" { // asked for: nothing to tell
		r.log.Info("coordkit: running the Redis scripts by EVALSHA", "why", why)
	}
}

// errOtherCode: a library of this name holds other code.
var errOtherCode = errors.New("another build's library of the same name is loaded")

// decisive reports whether a load's error settles the mode on EVALSHA for
// good: FUNCTION unknown (Redis < 7, a managed service) or refused (an
// ACL), the library's code refused, or another library of this name; not
// a network error, nor a server error that may pass.
func decisive(err error) bool {
	return errors.Is(err, errOtherCode) ||
		serverSays(err, "ERR unknown command") || serverSays(err, "ERR unknown subcommand") ||
		serverSays(err, "NOPERM") || serverSays(err, "ERR Error compiling") || serverSays(err, "ERR Error registering")
}

// loadAll loads the library on every master of a Cluster, every shard of
// a Ring, or the one server of another client.
func (r *Runner) loadAll(ctx context.Context) error {
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return Load(ctx, m) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error { return Load(ctx, m) })
	}
	return Load(ctx, r.rdb)
}

// Load loads the library on the server c talks to, unless it has it
// already; a library of the same name with other code is an error that
// matches nothing the server said (see Runner).
func Load(ctx context.Context, c redis.Cmdable) error {
	err := c.FunctionLoad(ctx, Code()).Err()
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		return err
	}
	libs, lerr := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: Library, WithCode: true}).Result()
	if lerr != nil {
		return lerr
	}
	for _, l := range libs {
		if l.Name == Library {
			if l.Code == Code() {
				return nil
			}
			return fmt.Errorf("redisfn: %w: %s", errOtherCode, Library)
		}
	}
	return err
}

// AsyncCaller runs scripts and functions without waiting: fn gets the
// answer, once, from another goroutine. internal/pipe's Pipeliner is one.
type AsyncCaller interface {
	Caller
	Go(ctx context.Context, s *redis.Script, keys []string, args []any, fn func(*redis.Cmd))
	GoFCall(ctx context.Context, function string, keys []string, args []any, fn func(*redis.Cmd))
}

// Go is Run without waiting: fn gets the answer, once, from another
// goroutine, and must not block. After "Function not found" the reload
// and the second call run on a goroutine of their own (rare: once per
// node that lost the library).
func (r *Runner) Go(ctx context.Context, c AsyncCaller, s *Script, keys []string, args []any, fn func(*redis.Cmd)) {
	if r.Mode() == Undecided {
		// The load must not hold up the caller (redlock sends to its
		// masters one after another from one goroutine, and a silent
		// master would stall the others), nor use up the call's time:
		// the call goes by EVALSHA now, the load runs in the background
		// (one at a time, bounded by loadTimeout; Close waits for it).
		// The call is queued here, on the caller's goroutine, so that a
		// client's calls keep their order: sent from a goroutine after
		// the decision (700ed80, reverted), a Redlock give-back's release
		// could run before the acquisition it undid and leave a level
		// behind (TestHandOffEndsWithCtx, the model-based test).
		if r.mu.TryLock() {
			r.bg.Add(1)
			go func() {
				defer r.bg.Done()
				defer r.mu.Unlock()
				lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadTimeout)
				defer cancel()
				r.decideLocked(lctx)
			}()
		}
		c.Go(ctx, s.eval, keys, args, fn)
		return
	}
	r.send(ctx, c, s, keys, args, fn)
}

func (r *Runner) send(ctx context.Context, c AsyncCaller, s *Script, keys []string, args []any, fn func(*redis.Cmd)) {
	if r.Mode() != Functions {
		c.Go(ctx, s.eval, keys, args, fn)
		return
	}
	loads := r.loads.Load()
	c.GoFCall(ctx, s.name, keys, args, func(cmd *redis.Cmd) {
		if err := cmd.Err(); err != nil && (missing(err) || refused(err)) {
			// Recover may load the library: not on the sender's goroutine.
			r.bg.Add(1)
			go func() {
				defer r.bg.Done()
				if r.Recover(ctx, err, loads) {
					cmd = r.again(ctx, c, s, keys, args)
				}
				fn(cmd)
			}()
			return
		}
		fn(cmd)
	})
}
