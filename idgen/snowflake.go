package idgen

import (
	"context"
	"fmt"
	"time"
)

// Snowflake issues int64 IDs of one Layout for one worker number. IDs of one
// Snowflake strictly increase across all goroutines and are never repeated,
// whatever its clock does: it waits out small clock steps back, returns
// *ClockBackwardsError for larger ones unless WithBorrow or WithLogicalClock
// says otherwise, and waits for the next tick when a tick's sequence is used
// up. It is safe for concurrent use; Next does not allocate.
type Snowflake struct {
	e      *engine
	layout Layout
	spec   spec
	worker int64

	// compose: id = (state &^ low) << workerBits | wpart | state & low
	low   uint64 // the sequence mask when the sequence sits below the worker, else 0
	wpart uint64 // the worker, shifted into place
	wbits uint
}

// NewSnowflake returns a generator of IDs in layout (the zero Layout is
// Twitter's 41/10/12) for worker, which must be in [0, 2^WorkerBits). It
// returns an error wrapping ErrInvalidLayout for an invalid layout or an epoch
// later than the clock, ErrInvalidWorker for a worker out of range,
// ErrInvalidOption for an option out of range, *ClockBackwardsError when the
// clock is behind a WithHighWater mark beyond the tolerance, and
// ErrTimeExhausted once the layout's time bits have run out.
func NewSnowflake(layout Layout, worker int64, opts ...Option) (*Snowflake, error) {
	sp, err := layout.spec()
	if err != nil {
		return nil, err
	}
	if worker < 0 || worker > sp.maxWorker {
		return nil, fmt.Errorf("%w: worker %d not in [0, %d]", ErrInvalidWorker, worker, sp.maxWorker)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if now := o.now(); now.Before(sp.epoch) {
		return nil, fmt.Errorf("%w: %w: epoch %v is after the clock's %v", ErrInvalidLayout, ErrEpochInFuture, sp.epoch, now)
	}
	e, err := newEngine(sp.seqBits, sp.seqMask, sp.tickNs, sp.epochNs, sp.maxTicks, o)
	if err != nil {
		return nil, err
	}
	s := &Snowflake{e: e, layout: layout, spec: sp, worker: worker, wbits: sp.workerBits}
	if sp.order == TimeSequenceWorker {
		s.wpart = uint64(worker)
	} else {
		s.low = sp.seqMask
		s.wpart = uint64(worker) << sp.seqBits
	}
	return s, nil
}

// compose turns an engine state into an ID.
func (s *Snowflake) compose(state uint64) int64 {
	return int64((state&^s.low)<<s.wbits | s.wpart | state&s.low)
}

// Next returns the next ID. It blocks while the current tick's sequence is
// used up (until the next tick) or while the clock is behind the last ID by
// no more than the tolerance. It returns *ClockBackwardsError (wrapping
// ErrClockBackwards) when the clock is further behind, ErrLeaseLost once a
// WithLease channel is closed, and ErrTimeExhausted after the layout's time
// bits run out.
func (s *Snowflake) Next() (int64, error) {
	hi, _, err := s.e.reserve(1)
	if err != nil {
		return 0, err
	}
	if m := s.e.obs.Metrics; m != nil {
		m.Issued("", 1)
	}
	return s.compose(hi), nil
}

// NextN fills dst with increasing IDs, taking a run of sequence numbers per
// compare-and-swap, and returns how many it filled: len(dst), or fewer with
// the error that stopped it (the same errors as Next). The IDs filled before
// an error are valid.
func (s *Snowflake) NextN(dst []int64) (int, error) {
	i := 0
	for i < len(dst) {
		hi, k, err := s.e.reserve(uint64(len(dst) - i))
		if err != nil {
			return i, err
		}
		if m := s.e.obs.Metrics; m != nil {
			m.Issued("", int(k))
		}
		for st := hi - k + 1; st <= hi; st++ {
			dst[i] = s.compose(st)
			i++
		}
	}
	return i, nil
}

// Layout returns the layout the generator was built with, as given.
func (s *Snowflake) Layout() Layout { return s.layout }

// Worker returns the generator's worker number.
func (s *Snowflake) Worker() int64 { return s.worker }

// Decompose is s.Layout().Decompose(id) without re-validating the layout.
func (s *Snowflake) Decompose(id int64) Parts { return s.spec.decompose(id) }

// HighWater returns the instant before which the times of all IDs issued so
// far lie (the end of the last tick issued, or of the WithHighWater mark).
// Saved through a HighWaterStore and passed to the next generator of the same
// worker with WithHighWater, it keeps that generator from reissuing IDs after
// a restart on a clock that was set back.
func (s *Snowflake) HighWater() time.Time { return s.e.highWater() }

// Retire stops the generator for good and returns its final high-water mark.
// From the moment it is called, Next, NextN and callers waiting inside them
// return cause (ErrRetired if cause is nil; ErrLeaseLost once a WithLease
// channel is closed), and every ID the generator ever returned lies before the
// mark it returns, which HighWater returns from then on: an ID being issued
// concurrently either made it in before, below the mark, or fails. Store the
// mark (Checkpoint) before the worker number goes to another generator. The
// first cause is kept; it is safe for concurrent use.
func (s *Snowflake) Retire(cause error) time.Time { return s.e.retire(cause) }

// HighWaterStore persists a worker's high-water mark, the instant before which
// every ID the worker issued lies, so that its next generator resumes above it.
// Implementations (Redis, ZooKeeper, a file) key it by layout and worker; Store
// must keep the maximum of the marks it is given, so that a late Store from a
// stale process cannot lower it, and never load a mark earlier than one it
// was given (a store of a coarser unit rounds up): a generator borrows up to
// the mark once Store has returned.
type HighWaterStore interface {
	// Load returns the mark, or the zero time if none was stored.
	Load(ctx context.Context) (time.Time, error)
	// Store records mark unless a later mark is already stored.
	Store(ctx context.Context, mark time.Time) error
}

// OpenSnowflake loads the worker's high-water mark from store and returns
// NewSnowflake(layout, worker, WithHighWater(mark), opts...). A clock behind
// the mark beyond the tolerance (or borrow) makes it fail with
// *ClockBackwardsError: the restart after a clock rollback that would reissue
// IDs is detected. With WithBorrow it also stores a first reservation
// (Checkpoint), so that the generator may borrow at once. Errors from store
// are returned as they are.
func OpenSnowflake(ctx context.Context, store HighWaterStore, layout Layout, worker int64, opts ...Option) (*Snowflake, error) {
	mark, err := store.Load(ctx)
	if err != nil {
		return nil, err
	}
	s, err := NewSnowflake(layout, worker, append(opts[:len(opts):len(opts)], WithHighWater(mark))...)
	if err != nil {
		return nil, err
	}
	if s.e.borrow > 0 {
		if err := s.Checkpoint(ctx, store); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Checkpoint stores a mark in store above every ID issued so far: HighWater,
// or for a generator built WithBorrow(ahead), a reservation, the later of
// HighWater and the clock plus ahead. A generator built WithHighWater (as
// OpenSnowflake builds them) borrows ticks ahead of its clock only below the
// last mark it stored this way; once they are used up, Next waits for the
// clock or the next Checkpoint. Call it periodically (more often than ahead,
// to keep room to borrow) and when the generator is retired. A restart from
// the stored mark is above every ID issued before the Checkpoint and every
// ID borrowed since; IDs issued since at ticks the clock had reached are
// covered only by the clock itself (a restart on a clock set back by more
// than the time since the Checkpoint could reissue them), so the interval
// bounds the rollback a crash can hide. It is safe for concurrent use with
// Next; errors from store are returned as they are.
func (s *Snowflake) Checkpoint(ctx context.Context, store HighWaterStore) error {
	return s.e.checkpoint(ctx, store)
}
