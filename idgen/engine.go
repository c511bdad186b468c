package idgen

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/coordkit/coordkit/internal/observe"
)

// engine hands out (tick, sequence) pairs that strictly increase, from one
// atomic state word. It is shared by Snowflake and Serial.
//
// The state is ticks<<seqBits | sequence of the last pair issued. A caller
// reads the clock, loads the state and computes the next state; a
// compare-and-swap publishes it. The CAS order is the issue order, and every
// successful CAS makes the state larger, so the pairs (and the IDs composed
// from them) strictly increase across all goroutines without a lock.
type engine struct {
	seqBits  uint
	seqMax   uint64 // largest sequence in a tick (≤ 1<<seqBits - 1)
	tickNs   int64
	epochNs  int64 // Unix nanoseconds of the epoch
	maxTicks int64 // first tick the time field cannot hold

	now    func() time.Time
	limit  int64 // max(tolerance, borrow): clock lag accepted without error
	borrow int64

	logical bool
	maxLead int64
	start   time.Time // clock reading at construction (origin of the elapsed time)
	elapsed func() time.Duration
	// offset is the logical clock minus the elapsed time, in ns since the
	// epoch: the largest wall-minus-elapsed reading seen, so the logical
	// clock follows the wall clock forward and never back. It is written
	// only when the wall clock gets ahead of the logical clock.
	offset atomic.Int64

	lost <-chan struct{}
	held func() bool // WithLeaseDeadline; nil: none

	obs *observe.IDs // logger and metrics hooks

	// ceiling is the first tick a borrow may not reach: for a generator built
	// WithHighWater, the tick of the last mark stored (the mark it started
	// from, then each Checkpoint's reservation), so that a restart from the
	// store starts above every borrowed ID; math.MaxInt64 otherwise. Raised
	// only, by reserved, after the store has the mark.
	ceiling atomic.Int64

	// cause is what Next returns once the generator is retired (set before
	// the state's retired bit).
	cause atomic.Pointer[error]

	// The state gets a cache line of its own: every CAS takes the line from
	// the other cores, and the read-mostly fields above must not go with it.
	_     [64]byte
	state atomic.Uint64 // retired bit | ticks<<seqBits | sequence of the last pair issued
	_     [56]byte
}

// retiredBit is set in the state by retire. Ticks and sequence use at most
// 63 bits, so the top bit is free; every CAS compares the whole word, so no
// CAS started before retire can succeed after it.
const retiredBit = 1 << 63

// Wake-up strategy while waiting for a tick: sleep (a real sleep, which costs
// no CPU) until spinMargin before the instant, then yield until it. Go's
// time.Sleep rounds sub-millisecond sleeps up to about a millisecond on Linux,
// which would lose most of a 1 ms tick, so nap uses nanosleep for the last
// stretch there. A waiter does not need to wake exactly at the tick: issuing a
// tick's 4096 IDs takes about 0.2 ms of a 1 ms tick, so waking 0.1 ms late
// costs no throughput, only that much latency for the caller that waited;
// the spin covers a nap that ends late on a busy machine. On the 2-core VM
// of bench/README.md, a 100 µs margin did no worse than 20 µs at the ceiling,
// for no measurable CPU (nanosleep usually overshoots by 60-90 µs anyway).
const (
	spinMargin = 100 * time.Microsecond
	maxNap     = 10 * time.Millisecond // re-check the lease and the clock at least this often
	coarseTick = 5 * time.Millisecond  // ticks this long wait with time.Sleep alone
)

func newEngine(seqBits uint, seqMax uint64, tickNs, epochNs, maxTicks int64, o options) (*engine, error) {
	e := &engine{
		seqBits:  seqBits,
		seqMax:   seqMax,
		tickNs:   tickNs,
		epochNs:  epochNs,
		maxTicks: maxTicks,
		now:      o.now,
		obs:      observe.NewIDs("coordkit/idgen", o.logger, o.metrics),
		borrow:   int64(o.borrow),
		logical:  o.maxLead > 0,
		maxLead:  int64(o.maxLead),
		elapsed:  o.elapsed,
		lost:     o.lost,
		held:     o.held,
	}
	e.limit = max(int64(o.tolerance), e.borrow)
	e.start = e.now()
	e.offset.Store(e.start.UnixNano() - epochNs)
	e.ceiling.Store(math.MaxInt64)
	if o.persistent {
		e.ceiling.Store(0)
	}
	if end := time.Unix(0, epochNs+maxTicks*tickNs); !o.highWater.Before(end) {
		// Compared as times: a mark after 2262 has no UnixNano, and one that
		// wrapped around to an early instant would be ignored.
		return nil, ErrTimeExhausted
	}
	if o.highWater.After(time.Unix(0, epochNs)) {
		// Resume above the mark: pretend the tick before it is used up.
		markNs := o.highWater.UnixNano() - epochNs
		first := ceilDiv(markNs, tickNs)
		if first >= maxTicks {
			return nil, ErrTimeExhausted
		}
		if o.persistent {
			e.ceiling.Store(first) // the store has this mark
		}
		if first > 0 {
			e.state.Store(uint64(first-1)<<seqBits | seqMax)
		}
	}
	ns, err := e.read()
	if err != nil {
		return nil, err
	}
	if e.ticks(ns) >= maxTicks {
		return nil, ErrTimeExhausted
	}
	if last := int64(e.state.Load() >> seqBits); e.ticks(ns) < last {
		if behind := last*tickNs - ns; behind > e.limit {
			return nil, e.backwards(behind)
		}
	}
	return e, nil
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return -(-a / b)
	}
	return (a + b - 1) / b
}

// read returns the generator's time in ns since the epoch.
func (e *engine) read() (int64, error) {
	t := e.now()
	ns := t.UnixNano() - e.epochNs
	if e.logical {
		return e.logicalTime(t, ns)
	}
	return ns, nil
}

// logicalTime returns the logical time for the wall time ns read at t, or an
// error if it leads ns by more than maxLead. The logical clock is the offset
// plus the monotonic elapsed time; a wall clock ahead of it raises the offset
// for good (a step forward is followed), so a later step back, even one that
// only undoes that step, leaves the logical clock where it was and shows as a
// lead instead of a clock behind the IDs already issued.
func (e *engine) logicalTime(t time.Time, ns int64) (int64, error) {
	var el int64
	if e.elapsed != nil {
		el = int64(e.elapsed())
	} else {
		el = int64(t.Sub(e.start))
	}
	off := e.offset.Load()
	for d := ns - el; d > off; off = e.offset.Load() {
		if e.offset.CompareAndSwap(off, d) {
			return ns, nil
		}
	}
	if l := off + el; l > ns {
		if l-ns > e.maxLead {
			return 0, e.refuse(&ClockBackwardsError{Behind: time.Duration(l - ns), Limit: time.Duration(e.maxLead)})
		}
		ns = l
	}
	return ns, nil
}

// ticks converts ns since the epoch into ticks, rounding down.
func (e *engine) ticks(ns int64) int64 {
	if ns < 0 {
		return -ceilDiv(-ns, e.tickNs)
	}
	if e.tickNs == int64(time.Millisecond) {
		return ns / int64(time.Millisecond) // a constant divisor compiles to a multiply
	}
	return ns / e.tickNs
}

func (e *engine) backwards(behind int64) error {
	return e.refuse(&ClockBackwardsError{Behind: time.Duration(behind), Limit: time.Duration(e.limit)})
}

// refuse logs and reports a clock found behind, and returns err.
func (e *engine) refuse(err *ClockBackwardsError) error {
	if e.obs != nil {
		e.obs.WarnEvery("clock behind the last ID beyond the tolerance", "behind", err.Behind, "limit", err.Limit)
		if e.obs.Metrics != nil {
			e.obs.Metrics.ClockBackwards(err.Behind, err)
		}
	}
	return err
}

func (e *engine) isLost() bool {
	if e.lost == nil {
		return false
	}
	select {
	case <-e.lost:
		return true
	default:
		return false
	}
}

// reserve issues k consecutive states, 1 ≤ k ≤ n, all in one tick, and returns
// the last of them. n must be at least 1.
func (e *engine) reserve(n uint64) (hi, k uint64, err error) {
	if e.isLost() {
		return 0, 0, e.lostErr()
	}
	t := e.now()                    // e.read(), by hand: this is the hot path
	if e.held != nil && !e.held() { // after the reading: the IDs' time is before the lease's deadline
		return 0, 0, e.lostErr()
	}
	ns := t.UnixNano() - e.epochNs
	if e.logical {
		if ns, err = e.logicalTime(t, ns); err != nil {
			return 0, 0, err
		}
	}
	seqMask := uint64(1)<<e.seqBits - 1
	for {
		old := e.state.Load()
		if old&retiredBit != 0 {
			return 0, 0, e.retiredErr()
		}
		last := int64(old >> e.seqBits)
		seq := old & seqMask
		cur := e.ticks(ns)
		if cur > last {
			// A new tick: its sequence starts at 0.
			if cur >= e.maxTicks {
				return 0, 0, ErrTimeExhausted
			}
			k = min(n, e.seqMax+1)
			hi = uint64(cur)<<e.seqBits | (k - 1)
			if e.state.CompareAndSwap(old, hi) {
				return hi, k, nil
			}
			continue // lost the race: reuse the reading, reload the state
		}
		if cur < last {
			// The clock is behind the last tick issued: a step back, a borrowed
			// tick, or only a stale reading (this goroutine was preempted
			// between reading the clock and loading the state while others
			// moved on). Tell them apart with a reading taken after a load.
			if behind := last*e.tickNs - ns; behind > e.limit {
				old = e.state.Load()
				if old&retiredBit != 0 {
					return 0, 0, e.retiredErr()
				}
				if ns, err = e.readHeld(); err != nil {
					return 0, 0, err
				}
				if behind = int64(old>>e.seqBits)*e.tickNs - ns; behind > e.limit {
					return 0, 0, e.backwards(behind)
				}
				continue
			}
		}
		if seq < e.seqMax {
			// Same tick (or a tolerated lag): the next sequence numbers.
			k = min(n, e.seqMax-seq)
			hi = old + k
			if e.state.CompareAndSwap(old, hi) {
				return hi, k, nil
			}
			continue
		}
		// The sequence of the last tick is used up: the next tick is needed.
		next := last + 1
		if next >= e.maxTicks {
			return 0, 0, ErrTimeExhausted
		}
		wait := next*e.tickNs - ns // until the clock reaches the next tick
		if wait <= e.borrow && next < e.ceiling.Load() {
			k = min(n, e.seqMax+1)
			hi = uint64(next)<<e.seqBits | (k - 1)
			if e.state.CompareAndSwap(old, hi) {
				return hi, k, nil
			}
			continue
		}
		if e.isLost() {
			return 0, 0, e.lostErr()
		}
		d := wait - e.borrow // until the tick is within the borrow
		if d <= 0 {
			// Within the borrow but not below the ceiling: wait for the
			// clock to reach the tick, or for a Checkpoint to raise it.
			d = wait
		}
		d = min(d, int64(maxNap))
		if e.tickNs >= int64(coarseTick) {
			// Go's timer wakes up to ~1 ms late; a long tick has room for
			// that, and time.Sleep parks the goroutine, not a thread.
			time.Sleep(time.Duration(d))
		} else {
			sleepFor(time.Duration(d))
		}
		if ns, err = e.readHeld(); err != nil {
			return 0, 0, err
		}
	}
}

// readHeld is read for issuing: ErrLeaseLost once the lease's deadline
// (WithLeaseDeadline) has passed at the reading.
func (e *engine) readHeld() (int64, error) {
	ns, err := e.read()
	if err == nil && e.held != nil && !e.held() {
		return 0, e.lostErr()
	}
	return ns, err
}

// sleepFor waits about d: a real sleep for all but spinMargin of it, then a
// yield, so a waiter neither burns a core nor oversleeps a tick.
func sleepFor(d time.Duration) {
	if d > 2*spinMargin {
		nap(d - spinMargin)
		return
	}
	yield()
}

// retire stops the engine for good: from the moment the retired bit is set,
// no CAS of a reserve succeeds, so the high-water mark it returns lies above
// every pair ever issued. The first cause is kept.
func (e *engine) retire(cause error) time.Time {
	if cause == nil {
		cause = ErrRetired
	}
	e.cause.CompareAndSwap(nil, &cause) // before the bit: readers of the bit see it
	e.state.Or(retiredBit)
	return e.highWater()
}

func (e *engine) retiredErr() error {
	if e.isLost() {
		return e.lostErr()
	}
	return *e.cause.Load()
}

// lostErr is what a call returns once the lease is lost: ErrLeaseLost, or
// the retire cause if the generator was retired with one that wraps it (a
// released worker lease's: ErrLeaseLost and why).
func (e *engine) lostErr() error {
	if c := e.cause.Load(); c != nil && errors.Is(*c, ErrLeaseLost) {
		return *c
	}
	return ErrLeaseLost
}

// reservation returns the mark a checkpoint stores: the high-water mark or,
// for a borrowing generator, the later of it and the clock plus the borrow
// (capped at the end of the time bits), which leaves room to borrow until
// the clock gets near it.
func (e *engine) reservation() time.Time {
	hw := e.highWater()
	if e.borrow == 0 || e.state.Load()&retiredBit != 0 {
		return hw // nothing more will be borrowed
	}
	ns, err := e.read()
	if err != nil {
		return hw // a logical clock beyond its lead: no room is reserved
	}
	r := min(ns+e.borrow, e.maxTicks*e.tickNs)
	if t := time.Unix(0, e.epochNs+r).UTC(); t.After(hw) {
		return t
	}
	return hw
}

// reserved raises the ceiling of a generator built WithHighWater to mark,
// which the store now holds.
func (e *engine) reserved(mark time.Time) {
	if e.ceiling.Load() == math.MaxInt64 {
		return // not built WithHighWater: borrowing is not limited
	}
	c := ceilDiv(mark.UnixNano()-e.epochNs, e.tickNs)
	for old := e.ceiling.Load(); c > old; old = e.ceiling.Load() {
		if e.ceiling.CompareAndSwap(old, c) {
			return
		}
	}
}

// checkpoint stores the generator's reservation in store, then lets it
// borrow up to it.
func (e *engine) checkpoint(ctx context.Context, store HighWaterStore) error {
	mark := e.reservation()
	if err := store.Store(ctx, mark); err != nil {
		return err
	}
	e.reserved(mark)
	return nil
}

// highWater returns the instant before which every pair issued so far lies:
// the end of the last tick issued.
func (e *engine) highWater() time.Time {
	last := int64((e.state.Load() &^ retiredBit) >> e.seqBits)
	return time.Unix(0, e.epochNs+(last+1)*e.tickNs).UTC()
}
