package redlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua script of this package (the lock's own scripts are run through
// lock.Node). It runs with Script.Run: EVALSHA, and EVAL once after
// NOSCRIPT.
var (
	//go:embed lua/raise_fence.lua
	raiseFenceLua string

	raiseFenceScript = redis.NewScript(raiseFenceLua)
)

// Scripts returns the Lua scripts this package runs besides lock.Scripts,
// by file name, so that tests and operators can load or audit them.
func Scripts() map[string]*redis.Script {
	return map[string]*redis.Script{"raise_fence.lua": raiseFenceScript}
}
