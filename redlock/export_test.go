package redlock

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/redisfn"
)

// Scripts returns the hash lock's scripts the package runs on the masters,
// by file name, for tests that arm a lost reply on one.
func Scripts() map[string]*redisfn.Script { return scripts() }

// Preload loads every script the package runs (raise_fence.lua too) on
// r's server, so that no load round trip follows on the wire.
func Preload(ctx context.Context, r redis.Cmdable) error {
	for _, s := range scripts() {
		if err := s.Preload(ctx, r); err != nil {
			return err
		}
	}
	return raiseFenceScript.Load(ctx, r).Err()
}

// InLine returns how many goroutines of c wait in its local line for key
// (behind the front): the tests wait for a liner instead of sleeping.
func InLine(c *Client, key string) int {
	c.lines.mu.Lock()
	defer c.lines.mu.Unlock()
	if l := c.lines.m[key]; l != nil {
		return len(l.queue)
	}
	return 0
}

// DecideScripts makes every master's Runner choose FCALL or EVALSHA now
// (a Client's first calls go by EVALSHA while it decides in the
// background): for tests that arm a fault on the string a call carries.
func DecideScripts(ctx context.Context, c *Client) {
	for _, r := range c.runs {
		r.Prepare(ctx)
	}
}
