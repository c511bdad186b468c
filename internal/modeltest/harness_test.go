package modeltest_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/redisfn"
)

// kind is an operation of a sequence.
type kind int

const (
	opObtain  kind = iota // TryObtain by Owner on Client with TTL (re-entry when Owner holds)
	opPair                // two goroutines of Owner on Client TryObtain at once, TTL and TTL2
	opRelease             // Release of lease Lease (live, lost or released before)
	opWait                // let Dur of real time pass
	opDelete              // DEL the lock's key (on master Master for redlock)
	opFence               // SET the fencing counter to the server's clock in µs + 10^9
	opCancel              // Owner's blocking Obtain on Client waits; the holder releases; its ctx is cancelled at that moment
)

var kindNames = map[kind]string{opObtain: "obtain", opPair: "pair", opRelease: "release", opWait: "wait",
	opDelete: "delete", opFence: "fence-ahead", opCancel: "cancel-at-grant"}

// op is one step of a sequence. Leases are named by the id of the op that
// obtained them ("L7"), so that a sequence with steps removed still names
// the same leases (a step naming a lease that was never obtained does
// nothing).
type op struct {
	ID     int
	Kind   kind
	Owner  int
	Client int
	TTL    time.Duration
	TTL2   time.Duration
	Lease  int
	Dur    time.Duration
	Read   bool // RW: the read side
	Master int  // redlock: the master of a delete or fence
	Lose   int  // masters (bit mask; 1 for a single server) whose reply to this step's script is lost and the command resent
	RW     bool // printed with its side
	Multi  bool // printed with its masters
	// NoOwner: printed without an owner (semaphore permits have none)
	NoOwner bool
}

func (o op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%-3d %-15s", o.ID, kindNames[o.Kind])
	side := "W"
	if o.Read {
		side = "R"
	}
	switch o.Kind {
	case opObtain:
		if o.NoOwner {
			fmt.Fprintf(&b, " client=c%d ttl=%v", o.Client, o.TTL)
			break
		}
		fmt.Fprintf(&b, " owner=o%d client=c%d ttl=%v", o.Owner, o.Client, o.TTL)
	case opPair:
		fmt.Fprintf(&b, " owner=o%d client=c%d ttls=%v,%v", o.Owner, o.Client, o.TTL, o.TTL2)
	case opRelease:
		fmt.Fprintf(&b, " lease=%s", leaseName(o.Lease))
	case opWait:
		fmt.Fprintf(&b, " %v", o.Dur)
	case opDelete, opFence:
		if o.Kind == opDelete && o.Lease != 0 {
			fmt.Fprintf(&b, " permit=L%d", o.Lease)
		}
		if o.Multi {
			fmt.Fprintf(&b, " master=m%d", o.Master)
		}
	case opCancel:
		if o.NoOwner {
			fmt.Fprintf(&b, " client=c%d ttl=%v cancel+%v", o.Client, o.TTL, o.Dur)
			break
		}
		fmt.Fprintf(&b, " waiter=o%d client=c%d ttl=%v cancel+%v", o.Owner, o.Client, o.TTL, o.Dur)
	}
	if o.RW && (o.Kind == opObtain || o.Kind == opCancel || o.Kind == opPair) {
		fmt.Fprintf(&b, " side=%s", side)
	}
	if o.Lose != 0 {
		if o.Multi {
			fmt.Fprintf(&b, " reply-lost+resent(masters %03b)", o.Lose)
		} else {
			b.WriteString(" reply-lost+resent")
		}
	}
	return b.String()
}

// violation is a failed check: Class names the check (so that shrinking
// keeps the same failure), Msg says what was seen.
type violation struct {
	Class string
	Msg   string
}

func (v *violation) Error() string { return v.Class + ": " + v.Msg }

func fail(class, format string, args ...any) error {
	return &violation{Class: class, Msg: fmt.Sprintf(format, args...)}
}

// model is one system under test with its reference model.
type model interface {
	// gen chooses the next op (id) from the model's state.
	gen(r *rand.Rand, id int) op
	// step runs o and checks its answers against the model.
	step(ctx context.Context, o op) error
	// check checks the invariants after every step.
	check(ctx context.Context) error
	// finish checks what is left at the end (pending loss reports).
	finish(ctx context.Context) error
	// close releases everything and closes the clients.
	close()
}

// system names a model and makes a fresh one (new key, new clients) per
// sequence.
type system struct {
	name string
	make func(t *testing.T, seed uint64) model
}

// result of one sequence.
type result struct {
	ops  []op // the ops run, up to and including the failing one
	err  error
	fail int // index in ops of the failing step, -1 if none
}

// run runs one sequence on a fresh model: generated from r (n steps) when
// ops is nil, else a replay of ops.
func run(t *testing.T, sys system, seed uint64, r *rand.Rand, n int, ops []op, logf func(string, ...any)) result {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m := sys.make(t, seed)
	defer m.close()
	var done []op
	if ops != nil {
		n = len(ops)
	}
	for i := range n {
		var o op
		if ops != nil {
			o = ops[i]
		} else {
			o = skip(m.gen(r, i))
		}
		done = append(done, o)
		t0 := time.Now()
		err := m.step(ctx, o)
		if err == nil {
			err = m.check(ctx)
		}
		if logf != nil {
			logf("%v  (%v)", o, time.Since(t0).Round(time.Millisecond))
		}
		if err != nil {
			return result{ops: done, err: err, fail: len(done) - 1}
		}
	}
	if err := m.finish(ctx); err != nil {
		return result{ops: done, err: err, fail: len(done) - 1}
	}
	return result{ops: done, fail: -1}
}

func classOf(err error) string {
	var v *violation
	if errors.As(err, &v) {
		return v.Class
	}
	return "error"
}

// testModel runs sys: random seeds for runTime() (or the one -model.seed),
// and on a failure shrinks it and fails the test with the shortest
// sequence found.
func testModel(t *testing.T, sys system) {
	deadline := time.Now().Add(runTime())
	var seeds []uint64
	start := time.Now()
	for {
		seed := *flagSeed
		if seed == 0 {
			seed = rand.Uint64()>>1 | 1
		}
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		var logf func(string, ...any)
		if *flagVerbose {
			logf = t.Logf
		}
		res := run(t, sys, seed, r, steps(), nil, logf)
		seeds = append(seeds, seed)
		if res.err != nil {
			report(t, sys, seed, res)
			return
		}
		if *flagSeed != 0 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%s: %d sequences of %d steps passed in %v, seeds %v", sys.name, len(seeds), steps(), time.Since(start).Round(time.Millisecond), seeds)
}

// report shrinks a failure and fails the test with it.
func report(t *testing.T, sys system, seed uint64, res result) {
	t.Helper()
	class := classOf(res.err)
	t.Logf("%s: seed %d failed at step %d of %d: %v; shrinking (budget %v)", sys.name, seed, res.fail+1, len(res.ops), res.err, shrinkBudget())
	ops, tries, err := shrink(t, sys, seed, res.ops, class, res.err)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: model violated, seed %d (reproduce: go test ./internal/modeltest -run 'TestModel/%s$' -model.seed=%d)\n", sys.name, seed, sys.name, seed)
	fmt.Fprintf(&b, "original failure at step %d of %d: %v\n", res.fail+1, len(res.ops), res.err)
	fmt.Fprintf(&b, "shrunk to %d steps (%d replays):\n", len(ops), tries)
	for _, o := range ops {
		fmt.Fprintf(&b, "    %v\n", o)
	}
	fmt.Fprintf(&b, "fails with: %v", err)
	t.Error(b.String())
}

// shrink removes steps from ops (delta debugging: chunks, then single
// steps) while a replay on a fresh key still fails with the same class of
// violation, within the shrink budget. Timing varies between replays: a
// candidate counts as failing if one replay fails.
func shrink(t *testing.T, sys system, seed uint64, ops []op, class string, err error) ([]op, int, error) {
	deadline := time.Now().Add(shrinkBudget())
	tries := 0
	fails := func(cand []op) (bool, []op, error) {
		if time.Now().After(deadline) {
			return false, nil, nil
		}
		tries++
		res := run(t, sys, seed, nil, 0, cand, nil)
		if res.err != nil && classOf(res.err) == class {
			return true, res.ops, res.err
		}
		return false, nil, nil
	}
	// The failing prefix, without the releases of leases it never
	// obtained, confirmed first.
	cur := dropOrphans(ops)
	if ok, got, e := fails(cur); ok {
		cur, err = got, e
	} else if ok, got, e := fails(cur); ok {
		cur, err = got, e
	}
	for n := 2; len(cur) > 1 && time.Now().Before(deadline); {
		chunk := (len(cur) + n - 1) / n
		removed := false
		for i := 0; i < len(cur); i += chunk {
			cand := append(append([]op(nil), cur[:i]...), cur[min(i+chunk, len(cur)):]...)
			if len(cand) == 0 {
				continue
			}
			if ok, got, e := fails(cand); ok {
				cur, err, removed = dropOrphans(got), e, true
				break
			}
		}
		switch {
		case removed:
			n = max(n-1, 2)
		case chunk == 1:
			return cur, tries, err
		default:
			n = min(n*2, len(cur))
		}
	}
	return cur, tries, err
}

// leaseName names the lease obtained by op id: "L7", and "L7b" for the
// second lease of pair #7 (id -7-1000).
func leaseName(id int) string {
	if id <= -1000 {
		return fmt.Sprintf("L%db", -id-1000)
	}
	return fmt.Sprintf("L%d", id)
}

// dropOrphans returns ops without the releases of leases that no op of
// ops obtained.
func dropOrphans(ops []op) []op {
	ids := map[int]bool{}
	for _, o := range ops {
		if o.Kind == opObtain || o.Kind == opPair || o.Kind == opCancel {
			ids[o.ID] = true
		}
	}
	var out []op
	for _, o := range ops {
		lease := o.Lease
		if lease <= -1000 {
			lease = -lease - 1000 // the second lease of a pair
		}
		if o.Kind == opRelease && !ids[lease] {
			continue
		}
		out = append(out, o)
	}
	return out
}

// loser is a go-redis hook that loses the reply of the next armed script:
// it runs the command, discards its reply and sends it again, returning
// the second reply, as go-redis's MaxRetries does after a network error
// on the read.
type loser struct {
	mu    sync.Mutex
	armed map[string]bool // protects: script names (acquire.lua...) whose next run loses its reply
	fired int
}

func (h *loser) arm(names ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = map[string]bool{}
	for _, n := range names {
		h.armed[n] = true
	}
	h.fired = 0
}

// disarm ends the arming and returns how many replies were lost.
func (h *loser) disarm() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = nil
	return h.fired
}

func (h *loser) take(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	name, _ := args[0].(string)
	switch strings.ToLower(name) {
	case "evalsha", "eval", "fcall":
	default:
		return false
	}
	script := scriptNames[shaOf(cmd)]
	h.mu.Lock()
	defer h.mu.Unlock()
	if script == "" || !h.armed[script] {
		return false
	}
	delete(h.armed, script)
	h.fired++
	return true
}

func (h *loser) untake(cmd redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.armed != nil {
		h.armed[scriptNames[shaOf(cmd)]] = true
		h.fired--
	}
}

// shaOf returns what names cmd's script in scriptNames: the SHA1 of an
// EVALSHA or EVAL, the function of an FCALL.
func shaOf(cmd redis.Cmder) string {
	args := cmd.Args()
	if s, _ := args[0].(string); strings.EqualFold(s, "eval") {
		body, _ := args[1].(string)
		x := sha1.Sum([]byte(body))
		return hex.EncodeToString(x[:])
	}
	s, _ := args[1].(string)
	return s
}

func (h *loser) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loser) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.take(cmd) {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") { // did not run: the EVAL that follows loses its reply
			h.untake(cmd)
			return err
		}
		cmd.SetErr(nil) // the reply is lost: send again
		return next(ctx, cmd)
	}
}

func (h *loser) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		hit := false
		for _, c := range cmds {
			if h.take(c) {
				hit = true
			}
		}
		if !hit {
			return next(ctx, cmds)
		}
		_ = next(ctx, cmds)
		for _, c := range cmds {
			c.SetErr(nil)
		}
		return next(ctx, cmds)
	}
}

// scriptNames maps every script's SHA1 (EVALSHA, EVAL) and function name
// (FCALL) to its file name: the library's scripts (internal/redisfn), the
// semaphore's as "sem_<file>", and Redlock's own one, a file of package
// redlock run as it is.
var scriptNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range redisfn.All() {
		dir, file := path.Split(s.File())
		if dir == "semaphore/" {
			file = "sem_" + file
		}
		m[s.Hash()], m[s.Name()] = file, file
	}
	redlockFiles, _ := filepath.Glob("../../redlock/lua/*.lua")
	for _, f := range redlockFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		m[sha1Hex(b)] = filepath.Base(f)
	}
	return m
}()

func sha1Hex(b []byte) string {
	s := sha1.Sum(b)
	return hex.EncodeToString(s[:])
}

// newRedis returns a go-redis client (default options: MaxRetries 3) of
// srv with a loser hook.
func newRedis(addr string, nodeTimeout bool) (*redis.Client, *loser) {
	h := &loser{}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: nodeTimeout})
	rdb.AddHook(h)
	return rdb, h
}

// waitFor polls cond every 5 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// randTTL draws a TTL between 150 ms and 8 s, a third of them short
// (under 600 ms).
func randTTL(r *rand.Rand) time.Duration {
	if r.IntN(3) == 0 {
		return time.Duration(150+r.IntN(450)) * time.Millisecond
	}
	return time.Duration(600+r.IntN(7400)) * time.Millisecond
}

// skip applies -model.skip to a generated op: a kind named there becomes a
// short wait, and "reply-lost" keeps every reply.
func skip(o op) op {
	if *flagSkip == "" {
		return o
	}
	for _, name := range strings.Split(*flagSkip, ",") {
		switch {
		case name == "reply-lost":
			o.Lose = 0
		case name == kindNames[o.Kind]:
			o = op{ID: o.ID, Kind: opWait, Dur: 10 * time.Millisecond}
		}
	}
	return o
}

// fenceFirst reports whether a sequence starts (id 0) with the fencing
// counter ahead of the clock: two in five do, so that the tokens of the
// whole sequence come from the counter (token + 1 is the next holder's).
func fenceFirst(r *rand.Rand, id int) bool { return id == 0 && r.IntN(5) < 2 }

// randWait draws how long a wait step lets real time pass: mostly under
// 300 ms (renewals of short TTLs, short TTLs running out), one in ten a
// second longer.
func randWait(r *rand.Rand) time.Duration {
	d := time.Duration(10+r.IntN(290)) * time.Millisecond
	if r.IntN(10) == 0 {
		d += time.Second
	}
	return d
}

// uniqueKey returns a fresh key for one sequence.
func uniqueKey(name string, seed uint64) string {
	return fmt.Sprintf("model:%s:%d:%x", name, seed, rand.Uint32())
}

// waitLost reports whether lost is closed, or closes within d.
func waitLost(lost <-chan struct{}, d time.Duration) bool {
	select {
	case <-lost:
		return true
	default:
	}
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-lost:
		return true
	case <-t.C:
		return isClosed(lost)
	}
}

// finishLost is the check at the end of a sequence that a lease of a hold
// deleted earlier reports the loss by deadline (plus 300 ms): true if it
// does. The short mode waits for deadlines within a second only (the
// checks after every step saw the earlier ones); the long mode waits for
// all of them.
func finishLost(lost <-chan struct{}, deadline time.Time) bool {
	if !long() && time.Until(deadline) > time.Second {
		return true
	}
	return waitLost(lost, time.Until(deadline)+300*time.Millisecond)
}

// pickLease picks the lease a release step names: seven times in ten one
// of preferred (live, not released), if any, else any of all.
func pickLease(r *rand.Rand, preferred, all []int) int {
	if len(preferred) > 0 && r.IntN(10) < 7 {
		return preferred[r.IntN(len(preferred))]
	}
	return all[r.IntN(len(all))]
}

// releasing says what a release step did, for failure messages.
func releasing(resent bool) string {
	if resent {
		return "releasing (reply lost, command resent)"
	}
	return "releasing"
}

// releasedTwice is the failure of a second release of lease id that
// answered err, not ErrNotHeld.
func releasedTwice(what string, id int, err error) error {
	return fail("release", "%s L%d a second time: %v, want ErrNotHeld", what, id, err)
}
