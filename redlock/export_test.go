package redlock

import "github.com/redis/go-redis/v9"

// Scripts returns every Lua script the package runs on the masters, by file
// name, for tests that load them or arm a lost reply on one.
func Scripts() map[string]*redis.Script { return scripts() }
