package redlock

import (
	"errors"
	"fmt"

	"github.com/coordkit/coordkit/lock"
)

var (
	// ErrInvalid is matched (errors.Is) by every error for an invalid
	// argument or configuration: no masters, a nil or duplicate master, an
	// even number of masters without WithEvenMasters, a TTL too short for
	// the drift and the node timeout, another invalid option.
	// Those errors match lock.ErrInvalid too.
	ErrInvalid = errors.New("redlock: invalid argument")
	// ErrNoQuorum is joined to lock.ErrNotObtained when an attempt got fewer
	// than a quorum of masters.
	ErrNoQuorum = errors.New("redlock: no quorum of masters")
	// ErrNoValidity is joined to lock.ErrNotObtained when an attempt got a
	// quorum too late: TTL − elapsed − drift was not positive.
	ErrNoValidity = errors.New("redlock: no validity left after the acquisition")
	// ErrFence is joined to lock.ErrNotObtained when the fencing counters
	// could not be raised on a quorum of masters (see Lease.Token).
	ErrFence = errors.New("redlock: fencing counters not raised on a quorum")
)

// invalidError is an invalid argument; it matches ErrInvalid and
// lock.ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return "redlock: invalid argument: " + e.msg }

func (e *invalidError) Is(target error) bool {
	return target == ErrInvalid || target == lock.ErrInvalid
}

func invalid(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// NodeError is the failure of one master in one round (acquire, release,
// renew, leave). Errors of several masters are combined with errors.Join.
type NodeError struct {
	Node int    // index of the master in New's slice
	Addr string // the master's address, if known
	Op   string // "acquire", "release", "renew", "leave", "fence", or "held" (another owner holds the lock)
	Err  error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("redlock: master %d (%s): %s: %v", e.Node, e.Addr, e.Op, e.Err)
}

// Unwrap returns the master's error.
func (e *NodeError) Unwrap() error { return e.Err }

// errHeldElsewhere is a NodeError's Err when another owner holds the lock.
var errHeldElsewhere = errors.New("held by another owner")

// errPassed is a NodeError's Err when a hand-off found another client's
// waiter queued and released the lock to it instead.
var errPassed = errors.New("released to another client's queued waiter")

// errReentered is a NodeError's Err when a hand-off found the releasing
// owner holding more than one level (the same owner through another
// client): nothing was handed over there.
var errReentered = errors.New("the releasing owner holds more than one level")
