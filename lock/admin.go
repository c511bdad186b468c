package lock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/coordkit/coordkit/internal/redisfn"
)

// Info is the state of one lock, as Inspect reads it.
type Info struct {
	Key string
	// Owners maps each owner holding the lock to its hold count (at most one
	// owner, unless the key was written by something else).
	Owners map[string]int64
	// TTL is the lock's remaining time to live (0 when free).
	TTL time.Duration
	// Token is the last fencing token issued for the key (0 if none ever).
	Token int64
	// HoldToken is the fencing token of the current hold (0 when free, or
	// for a hold written by a version that did not record it).
	HoldToken int64
	// Waiters lists the queued waiters in arrival order, each as its queue
	// entry ("<client id>:<n>", with "|<grant ms>|<owner>" for a Client's
	// waiter), and WaiterTTLs how long each keeps its place without calling
	// in again (negative: unknown, it is skipped when it comes first).
	Waiters    []string
	WaiterTTLs []time.Duration
	// Granted is the queue entry of the waiter a release granted the lock
	// to, until that waiter takes it ("" if none); its owner is in Owners.
	Granted string
	// Meta is the holder metadata the hold was taken with (WithHolderMeta),
	// "" if none. WaiterMetas is each queued waiter's, in Waiters' order.
	Meta        string
	WaiterMetas []string
	// Scripts is how the Client runs its Lua: "functions" (FCALL of the
	// coordkit_v<N> Redis Functions library, loaded on first use) or
	// "evalsha" (Redis < 7, FUNCTION refused by an ACL, or
	// COORDKIT_REDIS_FUNCTIONS=off; see the package documentation).
	Scripts string
}

// grantField is the hash field under which a release records the waiter it
// granted the lock to (GRANT in internal/redisfn/lua/lock/fields.lua). Owners
// may not start with a NUL byte, so it is never an owner.
const grantField = "\x00grant"

// tokenField is the hash field that holds the fencing token of the current
// hold (TOKEN in internal/redisfn/lua/lock/fields.lua).
const tokenField = "\x00t"

// metaField is the hash field that holds the hold's metadata (META in
// internal/redisfn/lua/lock/fields.lua).
const metaField = "\x00m"

// Held reports whether some owner holds the lock.
func (i Info) Held() bool { return len(i.Owners) > 0 }

// Inspect reads the state of key's lock in one round trip, for operators
// and tests. It fails if the lock's key holds another type.
func (c *Client) Inspect(ctx context.Context, key string) (Info, error) {
	if _, err := c.resolve(key, nil); err != nil {
		return Info{}, err
	}
	res, err := c.run.Run(ctx, c.rdb, redisfn.Inspect, c.keys(key)).Slice()
	if err != nil {
		return Info{}, fmt.Errorf("lock: inspect %q: %w", key, err)
	}
	info := Info{Key: key, Owners: map[string]int64{}, Scripts: c.run.Mode().String()}
	if len(res) != 6 {
		return info, fmt.Errorf("lock: inspect %q: unexpected reply %v", key, res)
	}
	kv, _ := res[0].([]any)
	for i := 0; i+1 < len(kv); i += 2 {
		owner, _ := kv[i].(string)
		s, _ := kv[i+1].(string)
		switch {
		case owner == grantField:
			info.Granted = s
			continue
		case owner == tokenField:
			info.HoldToken, _ = strconv.ParseInt(s, 10, 64)
			continue
		case owner == metaField:
			info.Meta = s
			continue
		case strings.HasPrefix(owner, "\x00"): // a level's id (LEVEL in fence.lua)
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return info, fmt.Errorf("lock: inspect %q: hold count %q of %q is not a number", key, s, owner)
		}
		info.Owners[owner] = n
	}
	if ms, _ := res[1].(int64); ms > 0 {
		info.TTL = time.Duration(ms) * time.Millisecond
	}
	if s, ok := res[2].(string); ok {
		if info.Token, err = strconv.ParseInt(s, 10, 64); err != nil {
			return info, fmt.Errorf("lock: inspect %q: fencing counter %q is not a number", key, s)
		}
	}
	ws, _ := res[3].([]any)
	left, _ := res[4].([]any)
	metas, _ := res[5].([]any)
	for i, w := range ws {
		s, _ := w.(string)
		info.Waiters = append(info.Waiters, s)
		var ms int64 = -1
		if i < len(left) {
			ms, _ = left[i].(int64)
		}
		info.WaiterTTLs = append(info.WaiterTTLs, time.Duration(ms)*time.Millisecond)
		var m string
		if i < len(metas) {
			m, _ = metas[i].(string)
		}
		info.WaiterMetas = append(info.WaiterMetas, m)
	}
	return info, nil
}

// Holder returns the owner holding key and its hold's fencing token, or ""
// and 0 when key is free (one round trip, read-only). The owner is the one
// of lock.WithOwner, or the random one a call without it got. redlock and
// zklock clients have the same method; package election reads the leader
// through it.
func (c *Client) Holder(ctx context.Context, key string) (owner string, token int64, err error) {
	info, err := c.Inspect(ctx, key)
	if err != nil {
		return "", 0, err
	}
	for o := range info.Owners {
		if owner == "" || o < owner { // one owner unless the key was written by hand
			owner = o
		}
	}
	if owner == "" {
		return "", 0, nil
	}
	return owner, info.HoldToken, nil
}

// ForceRelease deletes key's lock whoever holds it and passes it to the
// next waiter; the fencing counter is kept, so the next holder's token is still
// larger. The former holder's watchdog finds the lock gone at its next
// renewal and reports the lease lost. It returns whether a lock was held.
// For operators: a holder that is still running no longer has mutual
// exclusion (fencing tokens protect the resources that check them).
func (c *Client) ForceRelease(ctx context.Context, key string) (bool, error) {
	if _, err := c.resolve(key, nil); err != nil {
		return false, err
	}
	k := c.keys(key)
	n, err := c.run.Run(ctx, c.rdb, redisfn.ForceRelease, []string{k[0], k[2], k[3], k[1], k[4], k[0] + ":r:" + c.nextID()},
		c.chanPrefix, c.argWindow).Int64()
	if err != nil {
		return false, fmt.Errorf("lock: force-release %q: %w", key, err)
	}
	return n == 1, nil
}
