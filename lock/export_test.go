package lock

import (
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
)

// Scripts returns every Lua script the package runs, the hash lock's
// included, by file name: the tests load them and arm faults on them by SHA.
func Scripts() map[string]*redis.Script {
	all := hashlock.Scripts()
	all["simple_obtain.lua"] = simpleObtainScript
	all["simple_release.lua"] = simpleReleaseScript
	all["simple_renew.lua"] = simpleRenewScript
	all["rw_acquire.lua"] = rwAcquireScript
	all["rw_release.lua"] = rwReleaseScript
	all["rw_renew.lua"] = rwRenewScript
	return all
}

// InLine returns how many goroutines of c wait in its local line for key
// (behind the front): the tests wait for a liner instead of sleeping.
func InLine(c *Client, key string) int {
	c.gates.mu.Lock()
	defer c.gates.mu.Unlock()
	if g := c.gates.m[key]; g != nil {
		return len(g.line)
	}
	return 0
}
