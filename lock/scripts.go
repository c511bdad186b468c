package lock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of Simple, one file each (see the header of each for KEYS
// and ARGV). Client runs the hash lock's scripts, in internal/hashlock/lua.
// They run with Script.Run: EVALSHA, and EVAL once after NOSCRIPT.
var (
	//go:embed lua/simple_obtain.lua
	simpleObtainLua string
	//go:embed lua/simple_release.lua
	simpleReleaseLua string
	//go:embed lua/simple_renew.lua
	simpleRenewLua string

	simpleObtainScript  = redis.NewScript(simpleObtainLua)
	simpleReleaseScript = redis.NewScript(simpleReleaseLua)
	simpleRenewScript   = redis.NewScript(simpleRenewLua)
)
