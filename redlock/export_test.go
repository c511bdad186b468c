package redlock

import "github.com/redis/go-redis/v9"

// Scripts returns every Lua script the package runs on the masters, by file
// name, for tests that load them or arm a lost reply on one.
func Scripts() map[string]*redis.Script { return scripts() }

// InLine returns how many goroutines of c wait in its local line for key
// (behind the front): the tests wait for a liner instead of sleeping.
func InLine(c *Client, key string) int {
	c.lines.mu.Lock()
	defer c.lines.mu.Unlock()
	if l := c.lines.m[key]; l != nil {
		return len(l.queue)
	}
	return 0
}
