package redlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/redisfn"
)

// The Lua script of this package; the hash lock's own scripts, which it
// runs on every master, are the library's (internal/redisfn). It runs with
// Script.Run: EVALSHA, and EVAL once after NOSCRIPT.
var (
	//go:embed lua/raise_fence.lua
	raiseFenceLua string

	raiseFenceScript = redis.NewScript(raiseFenceLua)
)

// scripts returns the hash lock's scripts this package runs on the
// masters, by file name (acquire.lua, release.lua, handoff.lua, renew.lua,
// leave.lua, which package lock's Client runs too: the library's, in
// internal/redisfn); raise_fence.lua, run by EVALSHA, is raiseFenceScript.
func scripts() map[string]*redisfn.Script {
	all := hashlock.Scripts()
	delete(all, "force_release.lua")
	delete(all, "inspect.lua")
	return all
}
