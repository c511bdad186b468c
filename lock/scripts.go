package lock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one file each (see the header of each for KEYS and ARGV).
// They run with Script.Run: EVALSHA, and EVAL once after NOSCRIPT. The
// scripts that touch the wait queue start with common.lua, their shared
// helpers (queue entries, grants, fencing tokens).
var (
	//go:embed lua/common.lua
	commonLua string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/handoff.lua
	handoffLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/leave.lua
	leaveLua string
	//go:embed lua/force_release.lua
	forceReleaseLua string
	//go:embed lua/inspect.lua
	inspectLua string
	//go:embed lua/simple_obtain.lua
	simpleObtainLua string
	//go:embed lua/simple_release.lua
	simpleReleaseLua string
	//go:embed lua/simple_renew.lua
	simpleRenewLua string

	acquireScript       = redis.NewScript(commonLua + acquireLua)
	releaseScript       = redis.NewScript(commonLua + releaseLua)
	handoffScript       = redis.NewScript(commonLua + handoffLua)
	renewScript         = redis.NewScript(renewLua)
	leaveScript         = redis.NewScript(commonLua + leaveLua)
	forceReleaseScript  = redis.NewScript(commonLua + forceReleaseLua)
	inspectScript       = redis.NewScript(inspectLua)
	simpleObtainScript  = redis.NewScript(simpleObtainLua)
	simpleReleaseScript = redis.NewScript(simpleReleaseLua)
	simpleRenewScript   = redis.NewScript(simpleRenewLua)
)

// Scripts returns every Lua script the package runs, by file name, so that
// tests and operators can load (SCRIPT LOAD) or audit them.
func Scripts() map[string]*redis.Script {
	return map[string]*redis.Script{
		"acquire.lua":        acquireScript,
		"release.lua":        releaseScript,
		"handoff.lua":        handoffScript,
		"renew.lua":          renewScript,
		"leave.lua":          leaveScript,
		"force_release.lua":  forceReleaseScript,
		"inspect.lua":        inspectScript,
		"simple_obtain.lua":  simpleObtainScript,
		"simple_release.lua": simpleReleaseScript,
		"simple_renew.lua":   simpleRenewScript,
	}
}
