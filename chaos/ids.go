package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/idgen/workerid"
)

// The ids backend: every client process runs three parts at once, each with
// idGoroutines goroutines drawing IDs as fast as the pacer lets them:
//
//   - zk: a worker ID leased through ZooKeeper (workerid.ZKLeaser over the
//     3-node ensemble), its Snowflake (Lease.NewSnowflake, LayoutWorker10);
//   - redis: a worker ID leased through Redis (workerid.RedisLeaser), its
//     Snowflake;
//   - seg: redisid Segments of one tag on the same Redis.
//
// Leases are released now and then while their generators are in use, and
// taken again. Both Snowflakes read the process's clock, time.Now plus an offset that
// the nemesis steps through the slot's control file (clock-step). A lost
// lease is given up (Release) and a new one taken. IDs go to the process's
// ID file (idfile.go), lease and clock events to its JSON-lines history.
//
// The contention mode (chaos -ids-contend; the client's -idmax) makes the
// hand-over of a released worker ID to another process likely, as it is
// where a release that frees the ID before its generators have stopped and
// their mark is stored reissues IDs: both leasers offer worker IDs 0 to
// procs-2 only, so one process per part is always waiting and asks again
// every idContendRetry; a release is preceded by idBurst of drawing without
// the pacer, which goes on until the generators stop; and the nemesis gives
// the slots' clocks seeded skews of up to 4 ms (clockSkews).
const (
	idService    = "chaos"
	idGoroutines = 2
	idBatch      = 64                     // IDs per NextN call, Segment.Next run
	idFlushBytes = 16 << 10               // a goroutine's buffer is written at this size…
	idFlushEvery = 50 * time.Millisecond  // …or at this age
	idCheckpoint = 100 * time.Millisecond // high-water marks saved this often (default 3 s)
	ctlPoll      = 2 * time.Millisecond   // control file polled this often

	idContendRetry = time.Millisecond     // contention mode: a Lease that found every ID taken is retried after this
	idBurst        = 2 * time.Millisecond // contention mode: drawing at full speed before a release
)

// idLayout is the Snowflake layout of both Snowflake parts.
var idLayout = idgen.LayoutWorker10

// Ops of the ids backend's histories (Part names the part: zk, redis, seg).
const (
	opLease         = "lease"         // a worker ID leased: Lease (per part, 1, 2, …), Worker
	opLeaseFail     = "leasefail"     // Lease failed (first of a streak): Res
	opGenStart      = "genstart"      // the lease's Snowflake built: Clock (its clock, Unix ns), V (the mark it starts above, Unix ms)
	opGenErr        = "generr"        // a call failed (first of a streak of the same kind): Res
	opLeaseLost     = "leaselost"     // Lost closed with a cause other than Release: Res
	opLeaseRelease  = "leaserelease"  // Release invoked (the part's goroutines have stopped)
	opLeaseReleased = "leasereleased" // Release returned: Res
	opClockStep     = "clockstep"     // the clock offset changed: Off (new), V (step), Res "seq N"
)

// stepClock is the clock the Snowflakes read: time.Now plus an offset.
type stepClock struct{ off atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// Control files. The nemesis steps a slot's clock by writing the slot's
// control file (ctl-s<i>, replaced atomically by a rename) with one line,
// "<seq> <offset ns>"; every client process of the slot polls it every
// ctlPoll, applies a larger seq and records a clockstep event. A process
// that replaces a killed one starts from the file's offset, as a process
// restarted on a host keeps the host's clock.
func writeControl(path string, seq, off int64) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", seq, off)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readControl(path string) (seq, off int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("chaos: control file %s: %q", path, b)
	}
	if seq, err = strconv.ParseInt(f[0], 10, 64); err == nil {
		off, err = strconv.ParseInt(f[1], 10, 64)
	}
	return seq, off, err
}

// pacer keeps one goroutine at rate IDs per second (0: no limit), in bursts
// of a batch; a goroutine that fell behind (a fault) does not catch up.
type pacer struct {
	per  time.Duration // per batch
	next time.Time
}

func newPacer(rate int) *pacer {
	p := &pacer{next: time.Now()}
	if rate > 0 {
		p.per = time.Duration(float64(time.Second) * idBatch / float64(rate))
	}
	return p
}

func (p *pacer) wait(ctx context.Context) {
	if p.per == 0 {
		return
	}
	now := time.Now()
	if d := p.next.Sub(now); d > 0 {
		sleepCtx(ctx, d)
	} else if d < -100*time.Millisecond {
		p.next = now
	}
	p.next = p.next.Add(p.per)
}

// idsClient is one process of the ids backend.
type idsClient struct {
	cfg   clientConfig
	rec   *Recorder
	file  *IDFile
	clock *stepClock
	rdb   *redis.Client

	mu sync.Mutex // protects r
	r  *rand.Rand
}

// runIDs runs the three parts until ctx ends.
func runIDs(ctx context.Context, cfg clientConfig, rec *Recorder) error {
	c := &idsClient{cfg: cfg, rec: rec, clock: &stepClock{}, r: rand.New(rand.NewPCG(cfg.seed, 0x696473))}
	seq, off, err := readControl(cfg.ctl)
	if err != nil {
		return err
	}
	c.clock.off.Store(off)
	rec.Record(Event{Op: opClockStep, Off: off, Res: fmt.Sprintf("seq %d", seq)})
	if c.file, err = CreateIDFile(cfg.idsOut); err != nil {
		return err
	}
	defer c.file.Close()

	zkAddrs, redisAddr := cfg.addrs[:len(cfg.addrs)-1], cfg.addrs[len(cfg.addrs)-1]
	c.rdb = redis.NewClient(&redis.Options{Addr: redisAddr}) // the library's users' defaults
	defer c.rdb.Close()
	conn, events, err := zk.Connect(zkAddrs, cfg.session, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() { // drains the event channel; ends when conn is closed
		for range events {
		}
	}()
	common := []workerid.Option{workerid.WithCheckpoint(idCheckpoint), workerid.WithClock(c.clock.Now)}
	if cfg.idMax >= 0 {
		common = append(common, workerid.WithMax(int64(cfg.idMax)))
	}
	zkl, err := workerid.NewZK(conn, append(common, workerid.WithSessionTimeout(cfg.session), workerid.WithRoot("/chaos-ids"))...)
	if err != nil {
		return err
	}
	defer zkl.Close()
	rl, err := workerid.NewRedis(c.rdb, append(common, workerid.WithTTL(cfg.ttl))...)
	if err != nil {
		return err
	}
	segs, err := redisid.NewSegments(c.rdb, redisid.WithStepBounds(1000, 100_000), redisid.WithTargetInterval(time.Second))
	if err != nil {
		return err
	}
	defer segs.Close()
	seg, err := segs.For(idService)
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	run := func(f func()) {
		wg.Add(1)
		go func() { // owned by runIDs: each ends when ctx ends
			defer wg.Done()
			f()
		}()
	}
	run(func() { c.control(ctx, seq) })
	run(func() { c.snowflakes(ctx, partZK, zkl) })
	run(func() { c.snowflakes(ctx, partRedis, rl) })
	run(func() { c.segments(ctx, partSeg, seg) })
	wg.Wait()
	return nil
}

// control applies the clock steps of the slot's control file.
func (c *idsClient) control(ctx context.Context, seq int64) {
	t := time.NewTicker(ctlPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, off, err := readControl(c.cfg.ctl)
		if err != nil || s <= seq {
			continue
		}
		seq = s
		old := c.clock.off.Swap(off)
		c.rec.Record(Event{Op: opClockStep, Off: off, Val: off - old, Res: fmt.Sprintf("seq %d", s)})
	}
}

// leaser is what the Snowflake parts need of workerid's leasers.
type leaser interface {
	Lease(ctx context.Context, service string) (*workerid.Lease, error)
}

// snowflakes leases a worker ID, issues IDs on it until the lease is lost
// (or ctx ends), releases it, and starts again.
func (c *idsClient) snowflakes(ctx context.Context, part uint8, l leaser) {
	name := partNames[part]
	failing := ""
	for n := 1; ctx.Err() == nil; {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		lease, err := l.Lease(lctx, idService)
		cancel()
		if err != nil {
			if k := errKind(err); k != failing && ctx.Err() == nil {
				failing = k
				c.rec.Record(Event{Op: opLeaseFail, Part: name, Res: k})
			}
			retry := 50 * time.Millisecond
			if c.cfg.idMax >= 0 && errors.Is(err, workerid.ErrExhausted) {
				retry = idContendRetry
			}
			sleepCtx(ctx, retry)
			continue
		}
		failing = ""
		c.rec.Record(Event{Op: opLease, Part: name, Lease: n, Worker: lease.ID()})
		c.leased(ctx, part, n, lease)
		n++
	}
}

// leased runs one lease: the loss watcher, the generator and its
// goroutines, then the release. A lease that is neither lost nor ended by
// ctx is released after a random 0.2 to 2 s while its goroutines are still
// drawing IDs (Release stops the generator first, then stores its final
// mark, then frees the ID); the part waits up to 50 ms before leasing
// again, so another process may take the ID meanwhile.
func (c *idsClient) leased(ctx context.Context, part uint8, n int, lease *workerid.Lease) {
	name := partNames[part]
	base := Event{Part: name, Lease: n, Worker: lease.ID()}
	done := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() { // owned by leased: ends at the loss or the release
		defer watch.Done()
		select {
		case <-lease.Lost():
			if err := lease.Err(); !errors.Is(err, workerid.ErrReleased) {
				e := base
				e.Op, e.Res = opLeaseLost, errKind(err)
				c.rec.Record(e)
			}
		case <-done:
		}
	}()
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		e := base
		e.Op = opLeaseRelease
		c.rec.Record(e)
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := lease.Release(rctx)
		cancel()
		e.Op, e.Res = opLeaseReleased, errKind(err, errName{workerid.ErrReleased, "released"})
		c.rec.Record(e)
	}
	defer func() {
		release()
		close(done)
		watch.Wait()
	}()

	// The generator: a clock behind the stored mark (a step back) fails
	// with *ClockBackwardsError; wait for the clock and try again.
	var sf *idgen.Snowflake
	failing := ""
	for {
		clock := c.clock.Now()
		var err error
		sf, err = lease.NewSnowflake(ctx, idLayout, idgen.WithClock(c.clock.Now))
		if err == nil {
			e := base
			e.Op, e.Clock, e.Off, e.Val = opGenStart, clock.UnixNano(), c.clock.off.Load(), sf.HighWater().UnixMilli()
			c.rec.Record(e)
			break
		}
		if ctx.Err() != nil || lease.Err() != nil {
			return
		}
		if k := errKind(err, errName{idgen.ErrClockBackwards, "clock-backwards"}); k != failing {
			failing = k
			e := base
			e.Op, e.Res = opGenErr, "new: "+k
			c.rec.Record(e)
		}
		sleepCtx(ctx, 5*time.Millisecond)
	}

	var wg sync.WaitGroup
	var burst atomic.Bool // the goroutines draw without the pacer
	for g := range idGoroutines {
		wg.Add(1)
		go func() { // owned by leased: ends at the loss or the release, or when ctx ends
			defer wg.Done()
			c.issue(ctx, part, uint8(g), n, lease, sf, &burst)
		}()
	}
	hold := time.NewTimer(time.Duration(200+c.rnd(1800)) * time.Millisecond)
	select {
	case <-ctx.Done():
	case <-lease.Lost():
	case <-hold.C:
		if c.cfg.idMax >= 0 {
			burst.Store(true)
			sleepCtx(ctx, idBurst)
		}
		release() // while the goroutines draw IDs
	}
	hold.Stop()
	wg.Wait()
	release()
	if ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(c.rnd(50))*time.Millisecond)
	}
}

// rnd returns a number in [0, n), from the process's seeded source.
func (c *idsClient) rnd(n int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.r.Int64N(n)
}

// issue draws IDs from sf until its lease is lost or ctx ends, paced
// unless burst is set.
func (c *idsClient) issue(ctx context.Context, part uint8, g uint8, n int, lease *workerid.Lease, sf *idgen.Snowflake, burst *atomic.Bool) {
	w := newFlusher(c.file)
	defer w.flush()
	p := newPacer(c.cfg.rate / idGoroutines)
	buf := make([]int64, idBatch)
	h := BlockHeader{Part: part, G: g, Lease: uint32(n), Worker: lease.ID()}
	failing := ""
	for ctx.Err() == nil {
		if brokenIDs && lease.Err() != nil {
			return // a fresh generator does not know of the loss
		}
		if !burst.Load() {
			p.wait(ctx)
		}
		h.Start = monoNow()
		k, err := sf.NextN(buf)
		h.End = monoNow()
		if k > 0 {
			w.add(h, buf[:k])
			failing = ""
		}
		if err == nil {
			continue
		}
		if errors.Is(err, idgen.ErrLeaseLost) || errors.Is(err, idgen.ErrRetired) {
			return
		}
		if kind := errKind(err, errName{idgen.ErrClockBackwards, "clock-backwards"}); kind != failing {
			failing = kind
			c.rec.Record(Event{G: int(g), Op: opGenErr, Part: partNames[part], Lease: n, Worker: lease.ID(), Res: kind})
		}
		if brokenIDs && errors.Is(err, idgen.ErrClockBackwards) {
			// The chaosbroken build: "recover" from a clock step back with a
			// fresh generator on the same worker ID, without the lease's
			// high-water mark or its loss channel (broken.go).
			if fresh, ferr := idgen.NewSnowflake(idLayout, lease.ID(), idgen.WithClock(c.clock.Now)); ferr == nil {
				sf = fresh
				continue
			}
		}
		sleepCtx(ctx, time.Millisecond)
	}
}

// nexter is a segment generator: redisid's or sqlid's Segment.
type nexter interface {
	Next(ctx context.Context) (int64, error)
}

// segments draws IDs of part from seg in runs of idBatch.
func (c *idsClient) segments(ctx context.Context, part uint8, seg nexter) {
	var wg sync.WaitGroup
	for g := range idGoroutines {
		wg.Add(1)
		go func() { // owned by segments: ends when ctx ends
			defer wg.Done()
			w := newFlusher(c.file)
			defer w.flush()
			p := newPacer(c.cfg.rate / idGoroutines)
			buf := make([]int64, 0, idBatch)
			h := BlockHeader{Part: part, G: uint8(g), Worker: -1}
			failing := ""
			for ctx.Err() == nil {
				p.wait(ctx)
				buf = buf[:0]
				h.Start = monoNow()
				var err error
				for len(buf) < idBatch {
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					var id int64
					id, err = seg.Next(cctx)
					cancel()
					if err != nil {
						break
					}
					buf = append(buf, id)
				}
				h.End = monoNow()
				if len(buf) > 0 {
					w.add(h, buf)
					failing = ""
				}
				if err != nil && ctx.Err() == nil {
					if k := errKind(err); k != failing {
						failing = k
						c.rec.Record(Event{G: g, Op: opGenErr, Part: partNames[part], Res: k})
					}
					sleepCtx(ctx, 20*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
}

// flusher is a goroutine's BlockWriter that also writes its buffer once it
// is idFlushEvery old, so a kill loses little.
type flusher struct {
	w    *BlockWriter
	last time.Time
	err  error
}

func newFlusher(f *IDFile) *flusher {
	return &flusher{w: f.NewBlockWriter(idFlushBytes), last: time.Now()}
}

func (f *flusher) add(h BlockHeader, ids []int64) {
	if err := f.w.Add(h, ids); err != nil && f.err == nil {
		f.err = err
		fmt.Fprintln(os.Stderr, "chaos client: writing IDs:", err)
	}
	if time.Since(f.last) >= idFlushEvery {
		f.flush()
	}
}

func (f *flusher) flush() {
	if err := f.w.Flush(); err != nil && f.err == nil {
		f.err = err
		fmt.Fprintln(os.Stderr, "chaos client: writing IDs:", err)
	}
	f.last = time.Now()
}
