package hashlock

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one file each (see the header of each for KEYS and ARGV).
// They run with Script.Run: EVALSHA, and EVAL once after NOSCRIPT. The
// scripts that take or pass the lock are composed (withHelpers): fields.lua
// (the hash's reserved fields), fence.lua (fencing tokens, the clock), then
// queue.lua (the wait queue, grants); acquire.lua has fresh.lua's text
// where it makes a new hold (inline).
//
// Redis runs a script's body anew on every call, so every function the
// body defines is a new closure each time, and one that captures many of
// the script's locals costs more Redis time than a command: the common
// paths (a free lock taken, a hold released with nobody waiting) define
// none but fence.lua's two small ones. Measured on acquire and release
// (Redis time per uncontended lock+release pair, medians of 9 interleaved
// rounds, 32 goroutines): 22.9 µs against 27.7 µs when acquire's common
// path called functions fresh and dequeue and release's called record.
var (
	//go:embed lua/fields.lua
	fieldsLua string
	//go:embed lua/fence.lua
	fenceLua string
	//go:embed lua/queue.lua
	queueLua string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/fresh.lua
	freshLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/handoff.lua
	handoffLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/leave.lua
	leaveLua string
	//go:embed lua/force_release.lua
	forceReleaseLua string
	//go:embed lua/inspect.lua
	inspectLua string
)

// The scripts of the hash lock. lock.Client runs them with arguments it
// boxes once (see the header of each .lua file for KEYS and ARGV); Node
// runs the first five for callers that hold no Client (redlock).
var (
	AcquireScript      = redis.NewScript(withHelpers(inline(acquireLua, freshMark, freshLua)))
	ReleaseScript      = redis.NewScript(withLateHelpers(releaseLua))
	HandoffScript      = redis.NewScript(withHelpers(handoffLua))
	RenewScript        = redis.NewScript(renewLua)
	LeaveScript        = redis.NewScript(withHelpers(leaveLua))
	ForceReleaseScript = redis.NewScript(withHelpers(forceReleaseLua))
	InspectScript      = redis.NewScript(inspectLua)
)

// queueMark is the line of a script after which queue.lua goes.
const queueMark = "\n--#queue\n"

// freshMark is a line of acquire.lua that fresh.lua's text replaces.
const freshMark = "--#fresh\n"

// inline puts text in place of every line of body that is mark (after its
// indentation): Lua code that runs in several places of a script without
// being a function, whose closure would cost Redis time on every call.
func inline(body, mark, text string) string {
	if !strings.Contains(body, mark) {
		panic("hashlock: inline of a script without " + mark)
	}
	return strings.ReplaceAll(body, mark, text)
}

// withHelpers puts fields.lua and fence.lua in front of body, and queue.lua
// in front too, or in place of body's queueMark line if it has one: the
// common path that body runs before the mark does not create queue.lua's
// closures (about 0.3 µs of Redis time per call).
func withHelpers(body string) string {
	before, after, ok := strings.Cut(body, queueMark)
	if !ok {
		return fieldsLua + fenceLua + queueLua + body
	}
	return fieldsLua + fenceLua + before + "\n" + queueLua + after
}

// withLateHelpers is withHelpers for a body whose common path, before its
// queueMark line, needs only fields.lua: fence.lua goes at the mark with
// queue.lua (its closures cost about 1–2 µs of Redis time per call).
func withLateHelpers(body string) string {
	before, after, ok := strings.Cut(body, queueMark)
	if !ok {
		panic("hashlock: withLateHelpers of a script without " + queueMark)
	}
	return fieldsLua + before + "\n" + fenceLua + queueLua + after
}

// Scripts returns every script of the hash lock, by file name, so that
// tests can load (SCRIPT LOAD) them or arm a fault on one by its SHA.
func Scripts() map[string]*redis.Script {
	return map[string]*redis.Script{
		"acquire.lua":       AcquireScript,
		"release.lua":       ReleaseScript,
		"handoff.lua":       HandoffScript,
		"renew.lua":         RenewScript,
		"leave.lua":         LeaveScript,
		"force_release.lua": ForceReleaseScript,
		"inspect.lua":       InspectScript,
	}
}
