package redisid

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter hands out IDs with one INCR (or INCRBY) per call on a Redis string
// key. It is the simplest generator and pays a round trip per ID; prefer
// Segments unless every ID must come straight from Redis. It is safe for
// concurrent use.
type Counter struct {
	rdb  redis.UniversalClient
	key  string
	high atomic.Int64 // the highest value handed out: the rollback floor
}

// NewCounter returns a counter over key. It does no I/O and returns
// ErrEmptyKey for "".
func NewCounter(rdb redis.UniversalClient, key string) (*Counter, error) {
	if key == "" {
		return nil, ErrEmptyKey
	}
	return &Counter{rdb: rdb, key: key}, nil
}

// Next returns the next value of the counter (INCR): unique across every
// client of the key and positive. If Redis answers a value at or below the
// highest one this Counter had returned when it sent the command (Redis
// restarted from older data), the counter is raised past it atomically and
// the value above it is returned instead. Errors: Redis's, or ErrCorrupt
// (the key holds a hash or a non-integer), ErrOverflow.
func (c *Counter) Next(ctx context.Context) (int64, error) {
	return c.NextN(ctx, 1)
}

// NextN reserves n consecutive values with one INCRBY and returns the first:
// the caller owns [first, first+n). It returns ErrBadStep for n <= 0; other
// errors as Next.
func (c *Counter) NextN(ctx context.Context, n int64) (first int64, err error) {
	if n <= 0 {
		return 0, fmt.Errorf("%w: n = %d", ErrBadStep, n)
	}
	floor := c.high.Load() // before the command: see doc.go, "Rollback"
	var end int64
	if n == 1 {
		end, err = c.rdb.Incr(ctx, c.key).Result()
	} else {
		end, err = c.rdb.IncrBy(ctx, c.key, n).Result()
	}
	if err != nil {
		return 0, classify(c.key, err)
	}
	if end-n < floor {
		if end, err = raise(ctx, c.rdb, c.key, floor, n); err != nil {
			return 0, err
		}
	}
	raiseMax(&c.high, end)
	return end - n + 1, nil
}

// Key returns the counter's Redis key.
func (c *Counter) Key() string { return c.key }

// RaiseCounter sets the counter at key to floor unless it is already higher,
// atomically, and returns its value afterwards. Use it after Redis lost data
// without persistence: set the floor above every ID issued before (e.g. the
// largest ID in your database), and every generator of this package that
// draws from key (Counter, Segments) continues above it. Errors: ErrCorrupt
// if the key holds anything but an integer string.
func RaiseCounter(ctx context.Context, rdb redis.UniversalClient, key string, floor int64) (int64, error) {
	if key == "" {
		return 0, ErrEmptyKey
	}
	return raise(ctx, rdb, key, floor, 0)
}

// Hash hands out IDs from a step hash: a Redis hash with the fields offset,
// step, current and start, advanced by one Lua script per ID (see doc.go).
// It works on hashes created by hand with HSET as well as by CreateHash. It
// is safe for concurrent use.
type Hash struct {
	rdb  redis.UniversalClient
	key  string
	high atomic.Int64 // the highest value handed out (the rollback floor); math.MinInt64: none yet
}

// NewHash returns a generator over the step hash at key. It does no I/O and
// returns ErrEmptyKey for "".
func NewHash(rdb redis.UniversalClient, key string) (*Hash, error) {
	if key == "" {
		return nil, ErrEmptyKey
	}
	h := &Hash{rdb: rdb, key: key}
	h.high.Store(math.MinInt64)
	return h, nil
}

// Next returns the hash's next value: offset on the first call ever (start =
// 0), current + step after that. If the value would be at or below the
// highest one this Hash had returned when it sent the request, the script
// first advances current by whole steps past it. Errors: ErrNoHash,
// ErrCorrupt (not a hash, a field missing or not an integer, step <= 0),
// ErrOverflow, or Redis's.
func (h *Hash) Next(ctx context.Context) (int64, error) {
	floor := "" // a step hash may hand out values <= 0, so "none" is explicit
	if hi := h.high.Load(); hi != math.MinInt64 {
		floor = strconv.FormatInt(hi, 10)
	}
	s, err := stepHashScript.Run(ctx, h.rdb, []string{h.key}, floor).Text()
	if err != nil {
		return 0, classify(h.key, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrCorrupt, h.key, err)
	}
	raiseMax(&h.high, v)
	return v, nil
}

// Key returns the step hash's Redis key.
func (h *Hash) Key() string { return h.key }

// CreateHash creates the step hash at key with the given offset and step
// (current = offset, start = 0), unless the key already exists: it never
// overwrites anything. It reports whether it created the hash. To let k Redis
// nodes hand out disjoint series, create the hash on node i (0-based) with
// offset = base + i and step = k. Errors: ErrEmptyKey, ErrBadStep for
// step <= 0, or Redis's.
func CreateHash(ctx context.Context, rdb redis.UniversalClient, key string, offset, step int64) (created bool, err error) {
	if key == "" {
		return false, ErrEmptyKey
	}
	if step <= 0 {
		return false, fmt.Errorf("%w: %d", ErrBadStep, step)
	}
	n, err := createHashScript.Run(ctx, rdb, []string{key}, offset, step).Int64()
	if err != nil {
		return false, classify(key, err)
	}
	return n == 1, nil
}
