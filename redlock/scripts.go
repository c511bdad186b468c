package redlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
)

// The Lua script of this package; the hash lock's own scripts, which it
// runs on every master, are package lock's (in internal/hashlock/lua). It
// runs with Script.Run: EVALSHA, and EVAL once after NOSCRIPT.
var (
	//go:embed lua/raise_fence.lua
	raiseFenceLua string

	raiseFenceScript = redis.NewScript(raiseFenceLua)
)

// scripts returns every Lua script this package runs on the masters, by
// file name (acquire.lua, release.lua, handoff.lua, renew.lua, leave.lua,
// which package lock's Client runs too, and raise_fence.lua).
func scripts() map[string]*redis.Script {
	return map[string]*redis.Script{
		"acquire.lua":     hashlock.AcquireScript,
		"release.lua":     hashlock.ReleaseScript,
		"handoff.lua":     hashlock.HandoffScript,
		"renew.lua":       hashlock.RenewScript,
		"leave.lua":       hashlock.LeaveScript,
		"raise_fence.lua": raiseFenceScript,
	}
}
