package lock

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/redisver"
)

var (
	// ErrNotObtained is returned when the lock could not be obtained: held
	// by another owner (TryObtain), or ctx ended while waiting (then joined
	// with ctx.Err()).
	ErrNotObtained = errors.New("lock: not obtained")
	// ErrNotHeld is returned by Release when the lock was no longer held by
	// the lease's owner.
	ErrNotHeld = errors.New("lock: not held")
	// ErrLockLost is the cause with which Do cancels its function's ctx when
	// the lease is lost, and the error Do returns then.
	ErrLockLost = errors.New("lock: lease lost")
)

var (
	// ErrInvalid is wrapped by the errors for invalid arguments: a nil
	// client, an empty key, a TTL at or below zero or under MinTTL. The
	// invalid-argument errors of every lock package (redlock, zklock,
	// sqllock, semaphore) match it too.
	ErrInvalid = errors.New("lock: invalid argument")
	// ErrClosed is returned by a Client or Simple lock after Close, and is
	// the cause of the loss of every lease it still renewed.
	ErrClosed = errors.New("lock: client closed")
	// ErrTooFewReplicas is returned by Obtain when WithWaitReplicas is set
	// and fewer replicas acknowledged the acquisition in time.
	ErrTooFewReplicas = errors.New("lock: too few replicas acknowledged the lock")
	// ErrConflict is returned by Optimistic when every attempt found the
	// watched keys changed.
	ErrConflict = errors.New("lock: optimistic transaction kept conflicting")
	// ErrServerVersion is returned by the first call of a Redis lock
	// (Client, Simple, RW, semaphore.Client; for redlock.Client the first
	// that fails) whose server states a version older than MinRedisVersion,
	// and by a call whose script the server refused for a command it
	// lacks. The message names the server's version and the one needed.
	ErrServerVersion = errors.New("lock: Redis server too old")
)

// MinRedisVersion is the oldest Redis the Redis locks run on: their scripts
// use SET ... GET (Redis 6.2). The first call of a Client, Simple, RW or
// semaphore.Client (the first failed one of a redlock.Client, which must
// not wait for a silent master) asks the server (INFO server, once) and
// returns ErrServerVersion if it is older.
const MinRedisVersion = "6.2.0"

// checkServer runs g's version check against rdb (once per client).
func checkServer(ctx context.Context, g *redisver.Gate, rdb redis.UniversalClient) error {
	return g.Check(ctx, rdb, redisver.Min, redisver.Need, ErrServerVersion)
}

// serverErr names the version needed when err is a script refused for a
// command the server lacks.
func serverErr(err error) error {
	return redisver.Translate(err, redisver.Min, redisver.Need, ErrServerVersion)
}

// The checks of the hash lock's engine, which package redlock runs too, wrap
// hashlock.ErrInvalid: it is this package's ErrInvalid, set before any
// package that imports lock can call the engine.
func init() { hashlock.ErrInvalid = ErrInvalid }
