package redisid

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalid matches every invalid-argument error of this package
	// (ErrEmptyTag, ErrBadTag, ErrEmptyKey, ErrBadStep, ErrBadOption,
	// ErrBadShard, ErrBadNode, ErrBadID), as lock.ErrInvalid, idgen.ErrInvalid
	// and workerid.ErrInvalid do in theirs.
	ErrInvalid = errors.New("redisid: invalid argument")

	// ErrEmptyTag is returned by constructors and Next methods given an empty tag.
	ErrEmptyTag error = &invalidError{"redisid: empty tag"}

	// ErrBadTag is returned for a tag that contains '{' or '}': the tag becomes
	// a Redis Cluster hash tag, so it must not bring braces of its own.
	ErrBadTag error = &invalidError{"redisid: tag must not contain '{' or '}'"}

	// ErrEmptyKey is returned by constructors given an empty Redis key.
	ErrEmptyKey error = &invalidError{"redisid: empty key"}

	// ErrBadStep is returned (wrapped, with the value) for a step, increment
	// or step bound that is not positive, or bounds that do not contain the
	// initial step.
	ErrBadStep error = &invalidError{"redisid: step must be positive"}

	// ErrBadOption is returned (wrapped, with the reason) by constructors given
	// an option value outside its documented range.
	ErrBadOption error = &invalidError{"redisid: invalid option"}

	// ErrBadShard is returned (wrapped, with the value) for a logical shard
	// outside [0, MaxShard].
	ErrBadShard error = &invalidError{"redisid: shard out of range"}

	// ErrBadNode is returned (wrapped, with the value) by NewTime for a node
	// count outside [1, MaxNodes] or a node index outside [0, count).
	ErrBadNode error = &invalidError{"redisid: node index out of range"}

	// ErrBadID is returned (wrapped) by Parse and FromReply for a value that is
	// not an ID of the TIME layout.
	ErrBadID error = &invalidError{"redisid: invalid id"}

	// ErrClosed is returned by Next once Segments.Close has been called and the
	// segment in memory is used up.
	ErrClosed = errors.New("redisid: closed")

	// ErrCorrupt is returned (wrapped, with the key and Redis's own words)
	// when a key holds something this package did not expect: a string where a
	// hash belongs, a field that is missing or not an integer, a step hash
	// whose step is not positive.
	ErrCorrupt = errors.New("redisid: corrupt state in Redis")

	// ErrNoHash is returned (wrapped, with the key) by Hash.Next when the step
	// hash does not exist; create it with CreateHash (or by hand with HSET).
	ErrNoHash = errors.New("redisid: step hash does not exist")

	// ErrOverflow is returned (wrapped) when a counter would pass the largest
	// int64.
	ErrOverflow = errors.New("redisid: counter overflow")

	// ErrBusy is returned (wrapped in a *NodeError) when a node has handed out
	// every sequence value of the current millisecond for a tag and shard.
	// Time.Next retries on another node or in the next millisecond and only
	// returns it when ctx ends first.
	ErrBusy = errors.New("redisid: millisecond exhausted")

	// ErrClockBackwards is returned (wrapped in a *NodeError) when a node's
	// clock is behind the last millisecond it issued for the tag by more than
	// WithMaxClockBack allows.
	ErrClockBackwards = errors.New("redisid: Redis clock went backwards")

	// ErrTimeOverflow is returned when the Redis clock is past the last
	// millisecond the TIME layout can hold (2039-09-07T15:47:35.551Z).
	ErrTimeOverflow = errors.New("redisid: time beyond the layout's end in 2039")
)

// invalidError is an invalid-argument error that also matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// NodeError is the failure of one Redis node of a Time client. Time.Next
// joins one per node it tried (errors.Join) when no node could issue an ID.
type NodeError struct {
	Index int   // the node's index, as given in TimeNode.Index
	Err   error // what went wrong on it
}

func (e *NodeError) Error() string { return fmt.Sprintf("redisid: node %d: %v", e.Index, e.Err) }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// Error prefixes our scripts answer with (redis.error_reply).
const (
	replyNoHash    = "REDISID_NOHASH"
	replyCorrupt   = "REDISID_CORRUPT"
	replyOverflow  = "REDISID_OVERFLOW"
	replyBusy      = "REDISID_BUSY"
	replyBackwards = "REDISID_BACKWARDS"
)

// classify maps a Redis error about key to this package's sentinels and
// leaves every other error (network, ctx) as it is.
func classify(key string, err error) error {
	if err == nil {
		return nil
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err
	}
	msg := rerr.Error()
	switch {
	case strings.HasPrefix(msg, replyNoHash):
		return fmt.Errorf("%w: %s", ErrNoHash, key)
	case strings.HasPrefix(msg, replyCorrupt):
		return fmt.Errorf("%w: %s", ErrCorrupt, strings.TrimSpace(strings.TrimPrefix(msg, replyCorrupt)))
	case strings.HasPrefix(msg, replyOverflow), strings.Contains(msg, "would overflow"):
		return fmt.Errorf("%w: %s: %s", ErrOverflow, key, msg)
	case strings.HasPrefix(msg, "WRONGTYPE"), strings.Contains(msg, "not an integer"):
		return fmt.Errorf("%w: %s: %s", ErrCorrupt, key, msg)
	}
	return err
}
