package testserver

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// EvalCounter is a go-redis hook that counts the scripts (EVALSHA, EVAL and
// FCALL commands) its clients send, alone or in pipelines: the round trips a
// lock's protocol costs. Add it with AddHook; it is safe for concurrent use.
type EvalCounter struct{ n atomic.Int64 }

// N returns the scripts counted so far.
func (e *EvalCounter) N() int64 { return e.n.Load() }

func (e *EvalCounter) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if n := strings.ToLower(c.Name()); n == "evalsha" || n == "eval" || n == "fcall" {
			e.n.Add(1)
		}
	}
}

// DialHook passes dials through.
func (e *EvalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command.
func (e *EvalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { e.count(cmd); return next(ctx, cmd) }
}

// ProcessPipelineHook counts a pipeline's commands.
func (e *EvalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { e.count(cmds...); return next(ctx, cmds) }
}
