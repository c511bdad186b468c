package modeltest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/semaphore"
)

// shaRecorder records the SHA1 of every script a client runs.
type shaRecorder struct {
	mu   sync.Mutex // protects shas
	shas map[string]bool
}

func (r *shaRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *shaRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}

func (r *shaRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.record(c)
		}
		return next(ctx, cmds)
	}
}

func (r *shaRecorder) record(cmd redis.Cmder) {
	if name, _ := cmd.Args()[0].(string); !strings.EqualFold(name, "evalsha") && !strings.EqualFold(name, "eval") && !strings.EqualFold(name, "fcall") {
		return
	}
	r.mu.Lock()
	r.shas[shaOf(cmd)] = true
	r.mu.Unlock()
}

// TestScriptNames: scriptNames, built from the Lua files, names every
// script that the lock, Redlock and the semaphore run, so that a lost reply
// armed by name fires (the packages no longer export their scripts).
func TestScriptNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec := &shaRecorder{shas: map[string]bool{}}
	rdb := redis.NewClient(&redis.Options{Addr: masters[0].Addr()})
	rdb.AddHook(rec)
	defer rdb.Close()

	sem := semaphore.New(rdb, semaphore.WithPermits(2))
	defer sem.Close()
	p, err := sem.Acquire(ctx, "names-sem")
	if err != nil {
		t.Fatal(err)
	}
	if err := sem.SetPermits(ctx, "names-sem", 3); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rl, err := redlock.New([]redis.UniversalClient{rdb}, redlock.WithNodeTimeout(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	if err := lock.Do(ctx, rl, "names-redlock", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	c := lock.New(rdb)
	defer c.Close()
	if err := lock.Do(ctx, c, "names-lock", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.shas) < 5 {
		t.Fatalf("recorded %d scripts, want at least 5", len(rec.shas))
	}
	var named []string
	for sha := range rec.shas {
		n, ok := scriptNames[sha]
		if !ok {
			t.Errorf("script %s has no name in scriptNames", sha)
		}
		named = append(named, n)
	}
	for _, want := range []string{"sem_acquire.lua", "sem_release.lua", "sem_setlimit.lua", "acquire.lua", "release.lua"} {
		if !strings.Contains(strings.Join(named, " "), want) {
			t.Errorf("no script named %s ran (ran %v)", want, named)
		}
	}
}
