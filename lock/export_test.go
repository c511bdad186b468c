package lock

import (
	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/redisfn"
)

// Scripts returns every Lua script the package runs, the hash lock's
// included, by file name: the tests preload them and arm faults on them by
// the string their calls carry (redisfn.Script.Carried).
func Scripts() map[string]*redisfn.Script {
	all := hashlock.Scripts()
	all["simple_obtain.lua"] = redisfn.SimpleObtain
	all["simple_release.lua"] = redisfn.SimpleRelease
	all["simple_renew.lua"] = redisfn.SimpleRenew
	all["rw_acquire.lua"] = redisfn.RWAcquire
	all["rw_release.lua"] = redisfn.RWRelease
	all["rw_renew.lua"] = redisfn.RWRenew
	return all
}

// ScriptMode returns how c runs its scripts (FCALL or EVALSHA).
func ScriptMode(c *Client) redisfn.Mode { return c.run.Mode() }

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

// WakeChannel returns c's wake-up channel: a release publishes there the
// messages that wake or grant c's waiters.
func WakeChannel(c *Client) string { return c.chanPrefix + c.id }
