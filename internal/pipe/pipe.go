// Package pipe sends concurrent EVALSHA and FCALL calls to Redis in
// pipelines (automatic pipelining): when more than a few calls are in flight, the
// others queue and leave together, one write and one read for the batch
// instead of one round trip each. A Pipeliner is a redis.Scripter with
// FCall, so Script.Run and redisfn's Runner take it in place of the client.
//
// A call that finds fewer than the limit in flight runs at once on its own,
// as a plain Script.Run would; an idle client pays one mutex for the
// bookkeeping. A call that queues waits for its batch or for its ctx. A
// call whose ctx ends while it is still queued is taken out and returns
// ctx.Err(): it was never sent. A call whose batch has left waits for its
// answer, so a script that ran is never reported as not run (a lock taken
// and then forgotten until its TTL). The batch is bounded by the latest
// deadline of its calls, which go-redis enforces with ContextTimeoutEnabled,
// else by the client's read timeout.
//
// Queued batches are sent by sender goroutines, started as needed (about
// one per slot: one is started only when none is idle) and kept while
// there is work: a sender idle for a second ends, as do all at Close.
//
// Only EVALSHA and FCALL are batched; EVAL (Script.Run's fallback after NOSCRIPT) and
// the other Scripter methods go straight to the client. Go is the
// asynchronous form: the answer goes to a function, and a queued call
// costs no goroutine.
package pipe

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultInFlight is the number of calls (single or batch) that may be in
// flight before further calls queue.
const DefaultInFlight = 4

// maxBatch bounds one pipeline.
const maxBatch = 128

// Pipeliner batches script calls to one redis.UniversalClient. It is safe
// for concurrent use. Close waits for the batches in flight.
type Pipeliner struct {
	rdb   redis.UniversalClient
	limit int
	wg    sync.WaitGroup // the senders (goroutines sending queued batches)
	work  chan []*call   // a batch for an idle sender
	quit  chan struct{}  // closed by Close: idle senders end

	mu       sync.Mutex // protects the fields below
	inFlight int
	queue    []*call
	closed   bool        // no more goroutines: queued batches go out from their callers
	sweep    *time.Timer // takes out queued Go calls whose deadline passed; nil until needed
	sweepAt  time.Time   // when sweep fires; zero if it is not armed
}

type call struct {
	ctx   context.Context
	sha   string
	fcall string // FCall: the function (sha is "")
	keys  []string
	args  []any
	cmd   *redis.Cmd
	done  chan struct{} // EvalSha: closed when cmd has its answer

	// Go: called with the answer, and the script for the EVAL fallback.
	fn     func(*redis.Cmd)
	script *redis.Script
}

// finish hands c its answer (c.cmd).
func (c *call) finish(p *Pipeliner) {
	if c.fn == nil {
		close(c.done)
		return
	}
	if c.script != nil && redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") { // as Script.Run: once per script and server
		c.cmd = c.script.Eval(c.ctx, p.rdb, c.keys, c.args...)
	}
	c.fn(c.cmd)
}

var _ redis.Scripter = (*Pipeliner)(nil)

// New returns a Pipeliner over rdb that lets inFlight calls or batches run
// at once (DefaultInFlight when inFlight ≤ 0).
func New(rdb redis.UniversalClient, inFlight int) *Pipeliner {
	if inFlight <= 0 {
		inFlight = DefaultInFlight
	}
	return &Pipeliner{rdb: rdb, limit: inFlight, work: make(chan []*call), quit: make(chan struct{})}
}

// EvalSha runs EVALSHA sha1 with keys and args, possibly in a pipeline
// with other calls.
func (p *Pipeliner) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return p.wait(call{ctx: ctx, sha: sha1, keys: keys, args: args})
}

// FCall runs FCALL function with keys and args, possibly in a pipeline
// with other calls (EVALSHA ones too).
func (p *Pipeliner) FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd {
	return p.wait(call{ctx: ctx, fcall: function, keys: keys, args: args})
}

// run sends c on its own, on the client.
func (c *call) run(ctx context.Context, rdb redis.Cmdable) *redis.Cmd {
	if c.fcall != "" {
		return rdb.FCall(ctx, c.fcall, c.keys, c.args...)
	}
	return rdb.EvalSha(ctx, c.sha, c.keys, c.args...)
}

// wait runs cv at once if fewer than the limit are in flight, else queues
// it for a batch, and returns its answer. (cv is a value: the call is
// allocated only when it queues.)
func (p *Pipeliner) wait(cv call) *redis.Cmd {
	ctx := cv.ctx
	p.mu.Lock()
	if p.inFlight < p.limit {
		p.inFlight++
		p.mu.Unlock()
		cmd := cv.run(ctx, p.rdb)
		p.next()
		return cmd
	}
	c := &cv
	c.done = make(chan struct{})
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
	}
	p.mu.Lock()
	if i := slices.Index(p.queue, c); i >= 0 { // not sent: take it out
		p.queue = slices.Delete(p.queue, i, i+1)
		p.mu.Unlock()
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
	p.mu.Unlock()
	<-c.done // its batch has left: wait for the answer
	return c.cmd
}

// Go runs script s with keys and args as s.Run(ctx, p, keys, args...)
// would, without waiting: fn gets the answer, called once from another
// goroutine (or, after Close, from this one). fn must not block: it runs
// on the goroutine that sends the batches. A call that finds fewer than
// the limit in flight leaves at once, on a sender; one that queues costs
// no goroutine. A queued call is taken out, never sent, and fn gets the
// ctx's error when its deadline passes (one timer per Pipeliner watches
// the earliest) or, at the latest, when its batch would leave after its
// ctx ended; a cancelled ctx without a deadline is only seen then. Once
// its batch has left, fn gets its answer. After NOSCRIPT the sender runs
// the EVAL fallback itself, as Script.Run would.
func (p *Pipeliner) Go(ctx context.Context, s *redis.Script, keys []string, args []any, fn func(*redis.Cmd)) {
	p.goCall(&call{ctx: ctx, sha: s.Hash(), keys: keys, args: args, fn: fn, script: s})
}

// GoFCall is Go for FCALL function: fn gets FCALL's answer as it is.
func (p *Pipeliner) GoFCall(ctx context.Context, function string, keys []string, args []any, fn func(*redis.Cmd)) {
	p.goCall(&call{ctx: ctx, fcall: function, keys: keys, args: args, fn: fn})
}

func (p *Pipeliner) goCall(c *call) {
	ctx := c.ctx
	p.mu.Lock()
	if p.inFlight < p.limit {
		p.inFlight++
		p.dispatch([]*call{c}) // unlocks mu
		return
	}
	if d, ok := ctx.Deadline(); ok && (p.sweepAt.IsZero() || d.Before(p.sweepAt)) {
		p.armSweep(d)
	}
	p.queue = append(p.queue, c)
	p.mu.Unlock()
}

// armSweep makes the sweep run at at; mu must be held.
func (p *Pipeliner) armSweep(at time.Time) {
	p.sweepAt = at
	if p.sweep == nil {
		p.sweep = time.AfterFunc(time.Until(at), p.sweepQueue)
		return
	}
	p.sweep.Reset(time.Until(at))
}

// sweepQueue takes out the queued Go calls whose ctx ended or whose
// deadline passed, answers them with the ctx's error, and arms the sweep
// for the earliest deadline left.
func (p *Pipeliner) sweepQueue() {
	now := time.Now()
	var out []*call
	var next time.Time
	p.mu.Lock()
	p.sweepAt = time.Time{}
	keep := p.queue[:0]
	for _, c := range p.queue {
		if c.fn == nil { // EvalSha's callers watch their own ctx
			keep = append(keep, c)
			continue
		}
		d, ok := c.ctx.Deadline()
		if c.ctx.Err() != nil || ok && !now.Before(d) {
			out = append(out, c)
			continue
		}
		keep = append(keep, c)
		if ok && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	clear(p.queue[len(keep):])
	p.queue = keep
	if !next.IsZero() {
		p.armSweep(next)
	}
	p.mu.Unlock()
	for _, c := range out {
		err := c.ctx.Err()
		if err == nil {
			err = context.DeadlineExceeded
		}
		c.cmd = redis.NewCmd(c.ctx)
		c.cmd.SetErr(err)
		c.fn(c.cmd)
	}
}

// next hands the caller's slot to the queue: a sender sends what queued
// meanwhile, batch after batch, until the queue is empty.
func (p *Pipeliner) next() {
	p.mu.Lock()
	batch := p.take()
	if batch == nil {
		p.inFlight--
		p.mu.Unlock()
		return
	}
	p.dispatch(batch) // unlocks mu
}

// dispatch has batch, which holds a slot, sent by a sender: an idle one,
// or a new one, which then stays for later batches while busy (a sender
// keeps the stack that go-redis grew, where a new goroutine per batch
// would grow it again each time). After Close it sends from the calling
// goroutine. mu must be held; dispatch unlocks it.
func (p *Pipeliner) dispatch(batch []*call) {
	if p.closed { // send from here: Close has stopped waiting for goroutines
		p.mu.Unlock()
		p.drain(batch)
		return
	}
	p.wg.Add(1) // under mu and before Close sets closed: Close's Wait sees it
	p.mu.Unlock()
	select {
	case p.work <- batch: // an idle sender took it
		p.wg.Done()
	default:
		go p.sender(batch)
	}
}

// senderIdle is how long a sender waits for another batch before it ends,
// so that a Pipeliner that is never closed keeps no goroutine once quiet.
const senderIdle = time.Second

// sender drains batch, then waits for more work until Close or until it
// has been idle for senderIdle.
func (p *Pipeliner) sender(batch []*call) {
	defer p.wg.Done()
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	for {
		p.drain(batch)
		idle.Reset(senderIdle)
		select {
		case batch = <-p.work:
		case <-idle.C:
			return
		case <-p.quit:
			return
		}
	}
}

// drain sends batch, then what queued meanwhile, until the queue is empty,
// and frees the slot.
func (p *Pipeliner) drain(batch []*call) {
	for batch != nil {
		p.send(batch)
		p.mu.Lock()
		batch = p.take()
		if batch == nil {
			p.inFlight--
		}
		p.mu.Unlock()
	}
}

// take removes up to maxBatch calls from the queue; mu must be held.
func (p *Pipeliner) take() []*call {
	n := min(len(p.queue), maxBatch)
	if n == 0 {
		return nil
	}
	batch := make([]*call, n)
	copy(batch, p.queue)
	rest := copy(p.queue, p.queue[n:])
	clear(p.queue[rest:])
	p.queue = p.queue[:rest]
	return batch
}

// send runs a batch: calls whose ctx already ended are answered with
// ctx.Err() and not sent; one call goes alone; more go in one pipeline.
func (p *Pipeliner) send(batch []*call) {
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = redis.NewCmd(c.ctx)
			c.cmd.SetErr(err)
			c.finish(p)
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		c.cmd = c.run(c.ctx, p.rdb)
		c.finish(p)
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	pl := p.rdb.Pipeline()
	for _, c := range live {
		c.cmd = c.run(c.ctx, pl)
	}
	_, _ = pl.Exec(ctx) // each cmd carries its own answer or error
	for _, c := range live {
		c.finish(p)
	}
}

// batchContext bounds a batch by the latest deadline of its calls (none if
// one call has none); a call cancelled meanwhile does not cancel the others.
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(context.Background(), last)
}

// Eval runs EVAL on the client, unbatched.
func (p *Pipeliner) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return p.rdb.Eval(ctx, script, keys, args...)
}

// EvalRO runs EVAL_RO on the client, unbatched.
func (p *Pipeliner) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return p.rdb.EvalRO(ctx, script, keys, args...)
}

// EvalShaRO runs EVALSHA_RO on the client, unbatched.
func (p *Pipeliner) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return p.rdb.EvalShaRO(ctx, sha1, keys, args...)
}

// ScriptExists runs SCRIPT EXISTS on the client.
func (p *Pipeliner) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return p.rdb.ScriptExists(ctx, hashes...)
}

// ScriptLoad runs SCRIPT LOAD on the client.
func (p *Pipeliner) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return p.rdb.ScriptLoad(ctx, script)
}

// Close waits for the batches in flight to be answered. Calls made after
// Close still run; their batches go out from their callers' goroutines, so
// no goroutine outlives Close.
func (p *Pipeliner) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.quit)
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	if p.sweep != nil && len(p.queue) == 0 {
		p.sweep.Stop()
		p.sweepAt = time.Time{}
	}
	p.mu.Unlock()
}
