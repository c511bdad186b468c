package hashlock

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalid is lock.ErrInvalid: package lock's init sets it to its own
// sentinel (this value stands until then), so that the engine's checks
// (CheckKey, NewNode, a Node's arguments) wrap the sentinel users match
// without importing lock.
var ErrInvalid = errors.New("lock: invalid argument")

// The engine's defaults, the same as package lock's constants of the same
// names (a test of package lock checks that they agree).
const (
	// DefaultPrefix starts every key and channel of a zero Node.
	DefaultPrefix = "coordkit:lock:"
	// DefaultWaiterTimeout is NodeAcquire's WaiterTimeout when zero.
	DefaultWaiterTimeout = 5 * time.Second
	// DefaultReleaseWindow is NodeRelease's and NodeHandoff's Window when
	// zero.
	DefaultReleaseWindow = 10 * time.Second
)

// LockKeys returns the keys of the lock named key under prefix, in the
// order the scripts take them: hash, fence, queue, deadlines, waiter
// metadata (the key schema of package lock's documentation). They share
// the hash tag {key}, hence one Cluster slot.
func LockKeys(prefix, key string) []string {
	// The hash, queue, deadlines and waiter-metadata keys are prefixes of
	// one string ("P{key}:qtm"), so the five keys cost two allocations.
	qtm := prefix + "{" + key + "}:qtm"
	n := len(qtm) - len(":qtm")
	return []string{qtm[:n], qtm[:n] + ":fence", qtm[:n+len(":q")], qtm[:n+len(":qt")], qtm}
}

// WakePrefix is the prefix of every client's wake-up channel under prefix.
func WakePrefix(prefix string) string { return prefix + "wake:" }

// CheckKey returns an error wrapping ErrInvalid if key cannot name a lock:
// empty, or beginning with '}'. A lock's Redis keys are "P{key}..." with
// the hash tag {key}, so that they share one Cluster slot; a key that
// begins with '}' makes the tag empty, Redis then hashes each whole key,
// and the scripts would fail with CROSSSLOT on a Cluster. (Other braces
// are fine: the tag then ends at the key's first '}', the same for every
// key of the lock.)
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case key[0] == '}':
		return fmt.Errorf("%w: key %q begins with '}' (it would break the Cluster hash tag)", ErrInvalid, key)
	}
	return nil
}
