package lock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of Simple and RW, one file each (see the header of each for KEYS
// and ARGV). Client runs the hash lock's scripts, in internal/hashlock/lua.
// They run with Script.Run: EVALSHA, and EVAL once after NOSCRIPT.
var (
	//go:embed lua/simple_obtain.lua
	simpleObtainLua string
	//go:embed lua/simple_release.lua
	simpleReleaseLua string
	//go:embed lua/simple_renew.lua
	simpleRenewLua string

	//go:embed lua/rw_acquire.lua
	rwAcquireLua string
	//go:embed lua/rw_release.lua
	rwReleaseLua string
	//go:embed lua/rw_renew.lua
	rwRenewLua string

	rwAcquireScript = redis.NewScript(rwAcquireLua)
	rwReleaseScript = redis.NewScript(rwReleaseLua)
	rwRenewScript   = redis.NewScript(rwRenewLua)

	simpleObtainScript  = redis.NewScript(simpleObtainLua)
	simpleReleaseScript = redis.NewScript(simpleReleaseLua)
	simpleRenewScript   = redis.NewScript(simpleRenewLua)
)
