// Package redisver checks, once per client, that a Redis server is recent
// enough for the scripts that run on it, so that a user pointed at an older
// server (or at a Redis-compatible server that lacks a command) gets one
// error that names the version needed instead of a Lua error string.
package redisver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Min is the oldest Redis that coordkit's lock scripts run on
// (lock.MinRedisVersion), and Need what needs it.
var Min = Version{6, 2, 0}

// Need names what needs Min, for the errors.
const Need = "coordkit's lock scripts (SET ... GET)"

// Version is a server version: major, minor, patch.
type Version [3]int

// String returns "major.minor.patch".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

// Parse reads "6.2.14" (or "7.0", "7"); anything after a number's digits
// ("7.2.4-rc1") is ignored. ok is false when s does not start with a number.
func Parse(s string) (v Version, ok bool) {
	for i, part := range strings.SplitN(strings.TrimSpace(s), ".", 3) {
		j := 0
		for j < len(part) && part[j] >= '0' && part[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(part[:j])
		if err != nil {
			return v, i > 0
		}
		v[i] = n
	}
	return v, true
}

// FromInfo returns the version an INFO reply states: redis_version, the
// field Redis and the servers compatible with it (Valkey, KeyDB, Dragonfly)
// fill in. ok is false when the reply has none.
func FromInfo(info string) (v Version, ok bool) {
	for _, line := range strings.Split(info, "\n") {
		if rest, found := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); found {
			return Parse(rest)
		}
	}
	return v, false
}

// Check returns an error wrapping sentinel when info (an INFO server reply
// of the server at addr) states a version older than min; what names the
// feature that needs min. A reply that states no version passes: the
// scripts then fail on their own, and Translate names the need.
func Check(info string, min Version, what, addr string, sentinel error) error {
	v, ok := FromInfo(info)
	if !ok || !v.Less(min) {
		return nil
	}
	return fmt.Errorf("%w: Redis %s at %s is older than %s, which %s needs", sentinel, v, addr, min, what)
}

// Translate returns err wrapped with sentinel and the version needed when
// it is a server's refusal of a command or of its syntax inside a script
// (a Redis-compatible server that states a recent version but lacks a
// command); any other err is returned as it is.
func Translate(err error, min Version, what string, sentinel error) error {
	if err == nil || errors.Is(err, sentinel) {
		return err
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err
	}
	msg := strings.ToLower(rerr.Error())
	script := strings.Contains(msg, "script")
	if script && (strings.Contains(msg, "unknown redis command") || strings.Contains(msg, "unknown command") ||
		strings.Contains(msg, "syntax error")) {
		return fmt.Errorf("%w: the server refused a command of %s, which needs Redis %s or later: %w", sentinel, what, min, err)
	}
	return err
}

// Gate runs Check once per client: at its first call that reaches the
// server. Its zero value is ready; it is safe for concurrent use.
type Gate struct {
	state atomic.Int32 // 0: not checked, 1: a check in flight, 2: done
	err   atomic.Pointer[error]
}

// Check asks the server for its version the first time it is called (INFO
// server; a second caller while the first waits for the answer goes on
// without it) and returns the cached verdict after. A failed INFO (the
// server down, INFO forbidden by an ACL) passes, for good: asking again at
// every call would cost a dead server's timeout each time, and Translate
// still names the need if a script fails.
func (g *Gate) Check(ctx context.Context, rdb redis.UniversalClient, min Version, what string, sentinel error) error {
	if g.state.Load() == 2 {
		if p := g.err.Load(); p != nil {
			return *p
		}
		return nil
	}
	if !g.state.CompareAndSwap(0, 1) {
		return nil
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		g.state.Store(2)
		return nil
	}
	if err := Check(info, min, what, addrOf(rdb), sentinel); err != nil {
		g.err.Store(&err)
	}
	g.state.Store(2)
	if p := g.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Done reports whether the check has run (whatever its verdict).
func (g *Gate) Done() bool { return g.state.Load() == 2 }

// Pending reports whether the check has not begun.
func (g *Gate) Pending() bool { return g.state.Load() == 0 }

func addrOf(rdb redis.UniversalClient) string {
	if c, ok := rdb.(*redis.Client); ok {
		return c.Options().Addr
	}
	return "the server"
}
