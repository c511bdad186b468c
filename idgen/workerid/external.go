package workerid

import (
	"context"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

// LeaseConfig is what a leaser outside this package gives NewLease: the
// worker ID it took and how its keeper reports on it. The etcd module's
// leaser (github.com/coordkit/coordkit/etcd/etcdworker) is one; RedisLeaser,
// ZKLeaser and SQLLeaser fill the same fields inside this package.
type LeaseConfig struct {
	Service string
	ID      int64
	// Max is the highest worker ID the leaser hands out; NewSnowflake checks
	// that it fits the layout.
	Max int64
	// Lost is closed by the keeper once the ID is no longer held (lost, or
	// given back by Free).
	Lost <-chan struct{}
	// Held reports whether the lease's deadline is still ahead: the
	// generator asks it after every clock reading
	// (idgen.WithLeaseDeadline), so that a process stopped past the
	// deadline issues nothing once it resumes.
	Held func() bool
	// Err returns why Lost closed (ErrReleased after Free).
	Err func() error
	// HighWater is the store of the ID's high-water mark; it must only
	// ever raise the mark.
	HighWater idgen.HighWaterStore
	// Checkpoint is how often the generator saves its mark (at least 1 ms).
	Checkpoint time.Duration
	// Free closes Lost with ErrReleased, stops the keeper and gives the ID
	// back. Release calls it once, after the final mark is stored.
	Free func(ctx context.Context) error
}

// NewLease returns the Lease of a worker ID taken by a leaser outside this
// package, with the behaviour of every Lease (its generator, checkpoints,
// final mark, Release order): see LeaseConfig. It returns an error
// wrapping ErrInvalid when a field is missing or out of range.
func NewLease(c LeaseConfig) (*Lease, error) {
	switch {
	case checkService(c.Service) != nil:
		return nil, checkService(c.Service)
	case c.Max < 0 || c.ID < 0 || c.ID > c.Max:
		return nil, fmt.Errorf("%w: worker ID %d outside [0, %d]", ErrInvalid, c.ID, c.Max)
	case c.Lost == nil || c.Held == nil || c.Err == nil || c.HighWater == nil || c.Free == nil:
		return nil, fmt.Errorf("%w: LeaseConfig needs Lost, Held, Err, HighWater and Free", ErrInvalid)
	case c.Checkpoint < time.Millisecond:
		return nil, fmt.Errorf("%w: checkpoint interval %v below 1ms", ErrInvalid, c.Checkpoint)
	}
	return &Lease{
		service:    c.Service,
		id:         c.ID,
		max:        c.Max,
		lost:       c.Lost,
		held:       c.Held,
		cause:      c.Err,
		hw:         c.HighWater,
		checkpoint: c.Checkpoint,
		free:       c.Free,
	}, nil
}
