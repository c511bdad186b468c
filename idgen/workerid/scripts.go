package workerid

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/highwater.lua
	highwaterLua string

	renewScript     = redis.NewScript(renewLua)
	releaseScript   = redis.NewScript(releaseLua)
	highwaterScript = redis.NewScript(highwaterLua)
)
