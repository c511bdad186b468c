package pipe_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/pipe"
	"github.com/coordkit/coordkit/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// incrEcho increments KEYS[1] and answers {new value, ARGV[1]}.
var incrEcho = redis.NewScript(`return {redis.call('INCR', KEYS[1]), ARGV[1]}`)

// setOnce sets KEYS[1] to ARGV[1].
var setOnce = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1])`)

// pipelines counts the pipelines a client sends and their largest size.
type pipelines struct {
	n, largest atomic.Int64
}

func (p *pipelines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (p *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.n.Add(1)
		for {
			l := p.largest.Load()
			if int64(len(cmds)) <= l || p.largest.CompareAndSwap(l, int64(len(cmds))) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestConcurrentCallsGetTheirOwnAnswers: many goroutines through one
// Pipeliner; every call gets its own answer, each increment happens once,
// and calls did leave in pipelines.
func TestConcurrentCallsGetTheirOwnAnswers(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	var hook pipelines
	rdb.AddHook(&hook)
	p := pipe.New(rdb, 2)
	defer p.Close()
	ctx := context.Background()
	const g, per = 64, 200
	seen := make([]atomic.Bool, g*per+1)
	var wg sync.WaitGroup
	errc := make(chan error, g)
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range per {
				tag := strconv.Itoa(i*per + j)
				res, err := incrEcho.Run(ctx, p, []string{"pipe:n"}, tag).Slice()
				if err != nil {
					errc <- err
					return
				}
				n, _ := res[0].(int64)
				if res[1] != tag || n < 1 || n > g*per || seen[n].Swap(true) {
					errc <- errors.New("call " + tag + " got answer " + strconv.FormatInt(n, 10) + "/" + res[1].(string))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if n, err := rdb.Get(ctx, "pipe:n").Int(); err != nil || n != g*per {
		t.Fatalf("counter = %d, %v; want %d", n, err, g*per)
	}
	if hook.n.Load() == 0 || hook.largest.Load() < 2 {
		t.Fatalf("%d pipelines, largest %d: the calls never queued", hook.n.Load(), hook.largest.Load())
	}
	t.Logf("%d calls: %d pipelines, largest %d", g*per, hook.n.Load(), hook.largest.Load())
}

// TestNoScriptFallsBackToEval: after SCRIPT FLUSH, Script.Run through the
// Pipeliner still runs (EVAL after NOSCRIPT), also for queued calls.
func TestNoScriptFallsBackToEval(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	p := pipe.New(rdb, 1)
	defer p.Close()
	ctx := context.Background()
	for round := range 2 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- incrEcho.Run(ctx, p, []string{"pipe:flush"}, "x").Err()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	if n, _ := rdb.Get(ctx, "pipe:flush").Int(); n != 32 {
		t.Fatalf("counter = %d, want 32", n)
	}
}

// TestQueuedCallWhoseCtxEndsIsNotSent: with the server paused, one call
// holds the only slot; a queued call whose ctx ends returns at once and is
// never sent, so its script does not run once the server resumes.
func TestQueuedCallWhoseCtxEndsIsNotSent(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	p := pipe.New(rdb, 1)
	defer p.Close()
	ctx := context.Background()
	if err := setOnce.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		first <- setOnce.Run(c, p, []string{"pipe:first"}, "1").Err()
	}()
	time.Sleep(100 * time.Millisecond) // the first call holds the slot
	c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	start := time.Now()
	err := setOnce.Run(c, p, []string{"pipe:second"}, "1").Err()
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued call: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("queued call returned after %v", d)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first call after resume: %v", err)
	}
	p.Close() // the queued call's batch has been dealt with
	if n, err := rdb.Exists(ctx, "pipe:first", "pipe:second").Result(); err != nil || n != 1 {
		t.Fatalf("%d of the two keys exist (%v); want only the first", n, err)
	}
}

// TestServerKilled: calls in flight and queued fail with an error when the
// server dies; none hangs, and the Pipeliner works again after a restart.
func TestServerKilled(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	p := pipe.New(rdb, 1)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	const g = 8
	errs := make(chan error, g)
	for i := range g {
		go func() { errs <- incrEcho.Run(ctx, p, []string{"pipe:k"}, strconv.Itoa(i)).Err() }()
	}
	time.Sleep(100 * time.Millisecond)
	srv.Kill()
	for range g {
		if err := <-errs; err == nil {
			t.Fatal("a call succeeded on a killed server")
		}
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := incrEcho.Run(ctx, p, []string{"pipe:k"}, "again").Err(); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

// TestCallsAfterClose: calls made after Close still run, queued ones
// included, and start no goroutine (TestMain's goleak check).
func TestCallsAfterClose(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	p := pipe.New(rdb, 1)
	p.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- incrEcho.Run(ctx, p, []string{"pipe:after"}, strconv.Itoa(i)).Err()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := rdb.Get(ctx, "pipe:after").Int(); n != 32 {
		t.Fatalf("counter = %d, want 32", n)
	}
}

// busy runs for ARGV[1] ms of Redis server time, then sets KEYS[1].
var busy = redis.NewScript(`
local t = redis.call('TIME')
local stop = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])
repeat
  t = redis.call('TIME')
until t[1] * 1000 + math.floor(t[2] / 1000) >= stop
return redis.call('SET', KEYS[1], 'done')`)

// TestSentCallWaitsForItsAnswer: a call whose ctx ends after its batch left
// gets the script's real answer, not ctx.Err(): the script ran, and the
// caller must know it.
func TestSentCallWaitsForItsAnswer(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	p := pipe.New(rdb, 1)
	defer p.Close()
	ctx := context.Background()
	if err := busy.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- busy.Run(ctx, p, []string{"pipe:busy1"}, 300).Err() }()
	time.Sleep(50 * time.Millisecond) // the first call holds the only slot
	// Queued behind the first, sent at about 300 ms, answered at about
	// 600 ms: its ctx ends while it runs.
	c, cancel := context.WithTimeout(ctx, 450*time.Millisecond)
	defer cancel()
	if err := busy.Run(c, p, []string{"pipe:busy2"}, 300).Err(); err != nil {
		t.Fatalf("sent call: %v, want its answer", err)
	}
	if c.Err() == nil {
		t.Fatal("the call's ctx had not ended: the test proves nothing")
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, "pipe:busy1", "pipe:busy2").Result(); err != nil || n != 2 {
		t.Fatalf("%d of the two keys exist (%v)", n, err)
	}
}

// TestGo: asynchronous calls, many at once with the scripts flushed first
// (the EVAL fallback), each answered once with its own answer; a queued
// call whose ctx ends gets ctx.Err() at once and is never sent; after
// Close, calls are answered before Go returns.
func TestGo(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	var hook pipelines
	rdb.AddHook(&hook)
	p := pipe.New(rdb, 1)
	defer p.Close()
	ctx := context.Background()

	const n = 500
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	answers := make([]atomic.Int32, n)
	errs := make(chan error, n)
	wg.Add(n)
	for i := range n {
		p.Go(ctx, incrEcho, []string{"pipe:go"}, []any{strconv.Itoa(i)}, func(cmd *redis.Cmd) {
			defer wg.Done()
			answers[i].Add(1)
			v, err := cmd.Slice()
			if err != nil {
				errs <- err
				return
			}
			if v[1] != strconv.Itoa(i) {
				errs <- errors.New("answer of another call: " + v[1].(string) + " for " + strconv.Itoa(i))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range answers {
		if a := answers[i].Load(); a != 1 {
			t.Fatalf("call %d answered %d times", i, a)
		}
	}
	if v, _ := rdb.Get(ctx, "pipe:go").Int(); v != n {
		t.Fatalf("counter %d, want %d", v, n)
	}
	if hook.n.Load() == 0 {
		t.Fatal("no pipeline: every call went alone")
	}

	// Paused server: the first call holds the slot, the second queues and
	// its ctx ends.
	if err := setOnce.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
	defer fcancel()
	p.Go(fctx, setOnce, []string{"pipe:go:first"}, []any{"1"}, func(cmd *redis.Cmd) { first <- cmd.Err() })
	time.Sleep(50 * time.Millisecond)
	second := make(chan error, 1)
	sctx, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer scancel()
	start := time.Now()
	p.Go(sctx, setOnce, []string{"pipe:go:second"}, []any{"1"}, func(cmd *redis.Cmd) { second <- cmd.Err() })
	if err := <-second; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued call whose ctx ended: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("queued call answered after %v", d)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first call after resume: %v", err)
	}
	p.Close()
	if n, err := rdb.Exists(ctx, "pipe:go:first", "pipe:go:second").Result(); err != nil || n != 1 {
		t.Fatalf("%d of the two keys exist (%v); want only the first", n, err)
	}

	answered := false
	p.Go(ctx, incrEcho, []string{"pipe:go"}, []any{"closed"}, func(cmd *redis.Cmd) { answered = cmd.Err() == nil })
	if !answered {
		t.Fatal("a call after Close was not answered before Go returned")
	}
}

// TestIdleSendersEnd: a Pipeliner that is never closed keeps no goroutine
// once it has been quiet for a while.
func TestIdleSendersEnd(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent() // the server's and the client's own goroutines
	p := pipe.New(rdb, 2)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		p.Go(ctx, incrEcho, []string{"pipe:idle"}, []any{strconv.Itoa(i)}, func(cmd *redis.Cmd) {
			defer wg.Done()
			if err := cmd.Err(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	time.Sleep(1500 * time.Millisecond)
	goleak.VerifyNone(t, before)
}
