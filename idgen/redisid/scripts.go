package redisid

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed raise.lua
	raiseLua    string
	raiseScript = redis.NewScript(raiseLua)

	//go:embed stephash.lua
	stepHashLua    string
	stepHashScript = redis.NewScript(stepHashLua)

	//go:embed createhash.lua
	createHashLua    string
	createHashScript = redis.NewScript(createHashLua)

	//go:embed time.lua
	timeLua    string
	timeScript = redis.NewScript(timeLua)
)

// scripts lists every script of the package, for LoadScripts.
var scripts = []struct {
	name   string
	script *redis.Script
}{
	{"raise.lua", raiseScript},
	{"stephash.lua", stepHashScript},
	{"createhash.lua", createHashScript},
	{"time.lua", timeScript},
}

// LoadScripts loads every Lua script of this package into rdb's script cache
// (SCRIPT LOAD) and checks that Redis accepts it. Generators do not need it:
// they run scripts with EVALSHA and fall back to EVAL on NOSCRIPT, which also
// covers a Redis restarted with an empty cache. It is useful to fail fast at
// start-up, and the package's tests use it. On a Cluster client it loads the
// scripts on every master.
func LoadScripts(ctx context.Context, rdb redis.UniversalClient) error {
	for _, s := range scripts {
		if err := s.script.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("redisid: load %s: %w", s.name, err)
		}
	}
	return nil
}

// ScriptSHA returns the SHA1 digest under which Redis caches the named
// script ("raise.lua", "stephash.lua", "createhash.lua" or "time.lua"), or ""
// for an unknown name: for operators who call the scripts with EVALSHA from
// other languages.
func ScriptSHA(name string) string {
	for _, s := range scripts {
		if s.name == name {
			return s.script.Hash()
		}
	}
	return ""
}
