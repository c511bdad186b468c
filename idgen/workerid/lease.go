package workerid

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/watchdog"
)

// Lease is a worker ID held by this process until Release or loss. Its
// methods are safe for concurrent use.
type Lease struct {
	service    string
	id         int64
	max        int64
	lost       <-chan struct{}
	held       func() bool // the lease's deadline is still ahead (its keeper's Held)
	cause      func() error
	hw         idgen.HighWaterStore
	checkpoint time.Duration
	free       func(ctx context.Context) error // closes lost, stops the keeper, gives the ID back; after the final mark

	mu       sync.Mutex // protects gen, building, released, stop
	gen      *idgen.Snowflake
	building bool // a NewSnowflake is under way
	released bool
	stop     chan struct{} // closes the checkpoint loop; nil until the generator
	wg       sync.WaitGroup
}

// leaseEvents logs and reports a lease's keeper events (watchdog.Observer).
type leaseEvents struct {
	obs     *observe.IDs
	service string
	id      int64
}

// Renewed logs a renewal or heartbeat that failed without losing the lease.
func (e *leaseEvents) Renewed(err error) {
	if err != nil && !errors.Is(err, watchdog.ErrNotHeld) {
		e.obs.Warn("worker lease renewal failed", "service", e.service, "worker", e.id, "err", err)
	}
}

// Lost logs and reports a lease lost; a release is not a loss.
func (e *leaseEvents) Lost(cause error) {
	if errors.Is(cause, ErrReleased) {
		return
	}
	e.obs.Error("worker lease lost: its generators have stopped", "service", e.service, "worker", e.id, "cause", cause)
	if m := e.obs.Metrics; m != nil {
		m.LeaseLost(e.service, e.id, cause)
	}
}

// Service returns the service name the ID was leased for.
func (l *Lease) Service() string { return l.service }

// ID returns the leased worker ID.
func (l *Lease) ID() int64 { return l.id }

// Lost returns a channel that is closed once the ID is no longer held by
// this process: lost (Redis: a renewal answered "not held", or renewals kept
// failing; ZooKeeper: the session expired, or was in doubt for too long) or
// given back by Release. The generator made by NewSnowflake stops issuing at
// that moment, before the ID can be leased by another process (on Release,
// already before the final mark is stored), and after a loss its final mark
// is stored in the background (retried for up to 10 s), so that the ID's
// next holder starts above it if the store answers before that holder loads
// the mark. The generator also checks the lease's deadline itself, per call
// (idgen.WithLeaseDeadline): a process stopped past it issues nothing once
// it resumes, even before Lost has closed.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns why the lease ended (ErrReleased after Release), or nil while
// it is held.
func (l *Lease) Err() error {
	select {
	case <-l.lost:
		return l.cause()
	default:
		return nil
	}
}

// HighWater returns the store of this worker ID's high-water mark.
func (l *Lease) HighWater() idgen.HighWaterStore { return l.hw }

// NewSnowflake returns the Snowflake of the leased worker ID. It stops
// issuing IDs (idgen.ErrLeaseLost) the moment the lease is lost or released,
// starts above the worker's stored high-water mark (a clock behind it by more
// than the generator's tolerance makes NewSnowflake fail with
// *idgen.ClockBackwardsError), and saves its mark every checkpoint interval,
// after a loss and on Release. The lease's maximum worker ID must fit the
// layout (else an error wrapping ErrInvalid).
//
// A lease has one generator: once NewSnowflake has succeeded, later calls
// return ErrGeneratorExists (share the generator; it is safe for concurrent
// use), because two generators on one worker ID would issue the same IDs in
// the same tick. A call that fails leaves the lease free for another. After
// Release it returns ErrReleased.
func (l *Lease) NewSnowflake(ctx context.Context, layout idgen.Layout, opts ...idgen.Option) (*idgen.Snowflake, error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if width := workerWidth(layout); l.max >= 1<<width {
		return nil, fmt.Errorf("%w: maximum worker ID %d does not fit the %d worker bits of layout %q",
			ErrInvalid, l.max, width, layout.Name)
	}
	l.mu.Lock()
	switch {
	case l.released:
		l.mu.Unlock()
		return nil, ErrReleased
	case l.gen != nil || l.building:
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: worker ID %d of %q", ErrGeneratorExists, l.id, l.service)
	}
	l.building = true // the slot is taken while the mark is loaded
	l.mu.Unlock()

	// OpenSnowflake starts above the stored mark and, for a borrowing
	// generator, stores a first reservation: it borrows only below marks
	// that the store holds.
	all := append([]idgen.Option{idgen.WithLease(l.lost), idgen.WithLeaseDeadline(l.held)}, opts...)
	s, err := idgen.OpenSnowflake(ctx, l.hw, layout, l.id, all...)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.building = false
	if err != nil {
		return nil, err
	}
	if l.released {
		return nil, ErrReleased
	}
	l.gen = s
	l.stop = make(chan struct{})
	l.wg.Add(1)
	go l.checkpoints(l.stop) // owned by the lease: Release stops and waits for it
	return s, nil
}

// workerWidth is the number of bits of the whole worker number (datacenter
// and machine together, if split).
func workerWidth(l idgen.Layout) int {
	if l.WorkerBits == 0 && l.TimeBits == 0 && l.SequenceBits == 0 {
		return 10 // the zero Layout is Twitter's
	}
	return l.WorkerBits
}

// errReleased is what the generator of a released lease returns.
var errReleased = fmt.Errorf("%w (%w)", idgen.ErrLeaseLost, ErrReleased)

// Bounds of the final save after a loss: retried every finalRetry until it
// succeeds, finalFor has passed, or Release takes over.
const (
	finalFor   = 10 * time.Second
	finalRetry = 100 * time.Millisecond
)

// saveTimeout bounds a checkpoint's save when the interval is shorter: a
// save cut off at a short interval would never succeed on a database that
// answers more slowly than that, and the mark would never be stored.
const saveTimeout = 2 * time.Second

func (l *Lease) checkpoints(stop <-chan struct{}) {
	defer l.wg.Done()
	// A save in progress is cancelled when the lease is lost (the final save
	// takes over at once) or stopped (Release saves the mark itself); it ends
	// then if its store heeds the context between its calls.
	saves, cancel := l.until(context.Background(), stop, l.lost)
	defer cancel()
	t := time.NewTicker(l.checkpoint)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-l.lost:
			l.finalMark(stop)
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(saves, max(l.checkpoint, saveTimeout))
			l.saveMarks(ctx) // a failed save is retried at the next tick
			cancel()
		}
	}
}

// until returns a context derived from parent that is also cancelled when
// a or b closes. Its goroutine is the lease's (Release waits for it) and
// ends with the context.
func (l *Lease) until(parent context.Context, a, b <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		select {
		case <-a:
		case <-b:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// finalMark runs once the lease is lost: the generator already refuses to
// issue (its lease channel is closed); Retire makes its mark final, and the
// mark is stored, so that the ID's next holder starts above everything this
// one issued, borrowed ticks included. Writing after the ID may be someone
// else's is safe: a store only ever raises a mark.
func (l *Lease) finalMark(stop <-chan struct{}) {
	l.mu.Lock()
	g := l.gen
	l.mu.Unlock()
	g.Retire(idgen.ErrLeaseLost)
	deadline := time.Now().Add(finalFor)
	// Cut short by Release, which saves the mark itself.
	saves, cancel := l.until(context.Background(), stop, nil)
	defer cancel()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		ctx, cancel := context.WithDeadline(saves, deadline)
		err := g.Checkpoint(ctx, l.hw)
		cancel()
		if err == nil || !time.Now().Before(deadline) || saves.Err() != nil {
			return
		}
		retry.Reset(finalRetry)
		select {
		case <-stop:
			return // Release saves the mark itself
		case <-retry.C:
		}
	}
}

func (l *Lease) saveMarks(ctx context.Context) error {
	l.mu.Lock()
	g := l.gen
	l.mu.Unlock()
	if g == nil {
		return nil
	}
	return g.Checkpoint(ctx, l.hw)
}

// Release gives the ID back, in this order: it stops the lease's generator
// for good (Next returns an error matching idgen.ErrLeaseLost and
// ErrReleased, and no ID is issued above its final mark), stores that final
// mark, then closes Lost, stops keeping the lease and frees the ID, so that
// another process can lease it and start above the mark. The mark is stored
// also after the lease was lost (a store only raises a mark). It returns
// ErrReleased if called twice, and the error of saving or freeing otherwise:
// the ID is freed even when the save failed (or, when freeing failed, by its
// TTL or session end).
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return ErrReleased
	}
	l.released = true
	g, stop := l.gen, l.stop
	l.mu.Unlock()
	if g != nil {
		g.Retire(errReleased) // 1. no ID above the mark from here on
	}
	if stop != nil {
		close(stop)
	}
	l.wg.Wait()                              // the checkpoint loop (or a final save after a loss) is over
	saveErr := l.saveMarks(ctx)              // 2. the final mark
	return errors.Join(saveErr, l.free(ctx)) // 3. Lost closes, the ID is freed
}
