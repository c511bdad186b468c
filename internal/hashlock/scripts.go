package hashlock

import "github.com/coordkit/coordkit/internal/redisfn"

// Scripts returns every script of the hash lock (the library's, in
// internal/redisfn), by file name, so that tests can load them or arm a
// fault on one by the string its calls carry.
func Scripts() map[string]*redisfn.Script {
	return map[string]*redisfn.Script{
		"acquire.lua":       redisfn.Acquire,
		"release.lua":       redisfn.Release,
		"handoff.lua":       redisfn.Handoff,
		"renew.lua":         redisfn.Renew,
		"leave.lua":         redisfn.Leave,
		"force_release.lua": redisfn.ForceRelease,
		"inspect.lua":       redisfn.Inspect,
	}
}
