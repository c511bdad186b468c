// Package pipe sends concurrent EVALSHA calls to Redis in pipelines
// (automatic pipelining): when more than a few calls are in flight, the
// others queue and leave together, one write and one read for the batch
// instead of one round trip each. A Pipeliner is a redis.Scripter, so
// Script.Run takes it in place of the client.
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
// Only EVALSHA is batched; EVAL (Script.Run's fallback after NOSCRIPT) and
// the other Scripter methods go straight to the client.
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
	wg    sync.WaitGroup // the goroutines sending queued batches

	mu       sync.Mutex // protects the fields below
	inFlight int
	queue    []*call
	closed   bool // no more goroutines: queued batches go out from their callers
}

type call struct {
	ctx  context.Context
	sha  string
	keys []string
	args []any
	cmd  *redis.Cmd
	done chan struct{} // closed when cmd has its answer
}

var _ redis.Scripter = (*Pipeliner)(nil)

// New returns a Pipeliner over rdb that lets inFlight calls or batches run
// at once (DefaultInFlight when inFlight ≤ 0).
func New(rdb redis.UniversalClient, inFlight int) *Pipeliner {
	if inFlight <= 0 {
		inFlight = DefaultInFlight
	}
	return &Pipeliner{rdb: rdb, limit: inFlight}
}

// EvalSha runs EVALSHA sha1 with keys and args, possibly in a pipeline
// with other calls.
func (p *Pipeliner) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	p.mu.Lock()
	if p.inFlight < p.limit {
		p.inFlight++
		p.mu.Unlock()
		cmd := p.rdb.EvalSha(ctx, sha1, keys, args...)
		p.next()
		return cmd
	}
	c := &call{ctx: ctx, sha: sha1, keys: keys, args: args, done: make(chan struct{})}
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

// next hands the caller's slot to the queue: a goroutine sends what queued
// meanwhile, batch after batch, until the queue is empty.
func (p *Pipeliner) next() {
	p.mu.Lock()
	batch := p.take()
	if batch == nil {
		p.inFlight--
		p.mu.Unlock()
		return
	}
	if p.closed { // send from here: Close has stopped waiting for goroutines
		p.mu.Unlock()
		p.drain(batch)
		return
	}
	p.wg.Add(1) // under mu and before Close sets closed: Close's Wait sees it
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		p.drain(batch)
	}()
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
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		c.cmd = p.rdb.EvalSha(c.ctx, c.sha, c.keys, c.args...)
		close(c.done)
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	pl := p.rdb.Pipeline()
	for _, c := range live {
		c.cmd = pl.EvalSha(c.ctx, c.sha, c.keys, c.args...)
	}
	_, _ = pl.Exec(ctx) // each cmd carries its own answer or error
	for _, c := range live {
		close(c.done)
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
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}
