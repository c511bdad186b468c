package semaphore

import "github.com/coordkit/coordkit/internal/redisfn"

// Scripts returns the package's Lua scripts by file name, for tests that
// run them directly or arm a lost reply on one.
func Scripts() map[string]*redisfn.Script { return scripts() }

// SetZKHookBeforePermit sets the function a ZooKeeper acquisition calls
// with the semaphore's name once it has decided, under the acquirers'
// mutex, to take a permit, just before it creates it; restore puts the
// previous one back. For tests that must act at that moment.
func SetZKHookBeforePermit(f func(name string)) (restore func()) {
	old := zkHookBeforePermit
	zkHookBeforePermit = f
	return func() { zkHookBeforePermit = old }
}

// WakeChannel returns c's wake-up channel.
func WakeChannel(c *Client) string { return c.wake }
