package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// OptimisticOption configures Optimistic and Update.
type OptimisticOption func(*optimisticOptions)

type optimisticOptions struct {
	attempts int
	retry    func(attempt int) time.Duration
}

// WithAttempts bounds the number of attempts. Default: 100.
func WithAttempts(n int) OptimisticOption { return func(o *optimisticOptions) { o.attempts = n } }

// WithConflictRetry sets the delay before attempt n+1 after n conflicts.
// Default: a random delay below n ms, at most 10 ms (jitter separates the
// clients that collided).
func WithConflictRetry(retry func(attempt int) time.Duration) OptimisticOption {
	return func(o *optimisticOptions) { o.retry = retry }
}

func defaultConflictRetry(n int) time.Duration {
	return time.Duration(rand.Int64N(int64(min(n, 10)) * int64(time.Millisecond)))
}

// Optimistic runs fn inside WATCH keys and retries it for as long as the
// transaction fails because another client changed a watched key between
// WATCH and EXEC. fn reads through tx and queues its writes with
// tx.TxPipelined (MULTI/EXEC); on Cluster every key must share one hash
// slot. Many read-modify-writes need no lock: this costs no lock round
// trips, never blocks a crashed client's peers, and cannot be lost.
//
// It returns fn's error (not retried), ErrConflict when every attempt
// conflicted, errors.Join(ErrConflict, ctx.Err()) when ctx ended, or the
// Redis error, wrapped.
func Optimistic(ctx context.Context, rdb redis.UniversalClient, keys []string, fn func(tx *redis.Tx) error, opts ...OptimisticOption) error {
	o := optimisticOptions{attempts: 100, retry: defaultConflictRetry}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	switch {
	case rdb == nil:
		return fmt.Errorf("%w: nil redis client", ErrInvalid)
	case len(keys) == 0:
		return fmt.Errorf("%w: no key to watch", ErrInvalid)
	case fn == nil:
		return fmt.Errorf("%w: nil function", ErrInvalid)
	case o.attempts < 1 || o.retry == nil:
		return fmt.Errorf("%w: attempts %d", ErrInvalid, o.attempts)
	}
	var timer *time.Timer
	for attempt := 1; ; attempt++ {
		err := rdb.Watch(ctx, fn, keys...)
		if !errors.Is(err, redis.TxFailedErr) {
			if err != nil && ctx.Err() != nil {
				return errors.Join(ErrConflict, ctx.Err())
			}
			return err
		}
		if attempt >= o.attempts {
			return fmt.Errorf("%w: %d attempts on %v", ErrConflict, attempt, keys)
		}
		d := o.retry(attempt)
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return errors.Join(ErrConflict, ctx.Err())
		}
	}
}

// Update replaces the string at key with f(old, exists) using Optimistic:
// GET under WATCH, then SET with KEEPTTL in MULTI/EXEC, retried while
// another client changed key in between. It returns the value written, or
// f's error, or Optimistic's errors.
func Update(ctx context.Context, rdb redis.UniversalClient, key string, f func(old string, exists bool) (string, error), opts ...OptimisticOption) (string, error) {
	if f == nil {
		return "", fmt.Errorf("%w: nil function", ErrInvalid)
	}
	var written string
	err := Optimistic(ctx, rdb, []string{key}, func(tx *redis.Tx) error {
		old, err := tx.Get(ctx, key).Result()
		exists := true
		if errors.Is(err, redis.Nil) {
			exists, err = false, nil
		}
		if err != nil {
			return err
		}
		v, err := f(old, exists)
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.SetArgs(ctx, key, v, redis.SetArgs{KeepTTL: true})
			return nil
		})
		if err == nil {
			written = v
		}
		return err
	}, opts...)
	return written, err
}
