package main

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bwsnowflake "github.com/bwmarrin/snowflake"
	"github.com/coordkit/coordkit/idgen"
	"github.com/google/uuid"
	"github.com/oklog/ulid/v2"
	"github.com/rs/xid"
	"github.com/sony/sonyflake/v2"
)

// The idgen suite: coordkit's in-process generators against bwmarrin/snowflake,
// sony/sonyflake, rs/xid, google/uuid and oklog/ulid. For each generator, the
// medians over env.Rounds rounds of env.Dur each of: IDs/s and ns/op from one
// goroutine, IDs/s from two goroutines with GOMAXPROCS=2, CPU time
// (user+sys, getrusage) per million IDs in both, and allocations per ID.
// Snowflake-style generators are also given as a share of their layout's
// ceiling (2^sequence bits per tick): 4,096,000 IDs/s for 12 bits at 1 ms.
func init() {
	register(Suite{Name: "idgen", Run: runIDGen})
}

// idGen is one generator under test: next issues n IDs (1, or a batch) and
// returns some bits of them, which the caller folds into a local sum so that
// nothing is optimised away and no generator pays for a shared sink.
type idGen struct {
	name    string
	ceiling float64 // IDs/s the layout allows; 0: none
	next    func() (bits int64, n int, err error)
	per     float64 // IDs per call of next
}

// batch is the NextN batch size measured.
const batch = 256

func idGens() ([]idGen, error) {
	var gens []idGen
	add := func(name string, ceiling float64, next func() (int64, int, error)) {
		gens = append(gens, idGen{name, ceiling, next, 1})
	}
	one := func(f func() int64) func() (int64, int, error) {
		return func() (int64, int, error) { return f(), 1, nil }
	}
	sf := func(f func() (int64, error)) func() (int64, int, error) {
		return func() (int64, int, error) { id, err := f(); return id, 1, err }
	}

	add("time.Now() (floor)", 0, one(func() int64 { return time.Now().UnixNano() }))

	ckTwitter, err := idgen.NewSnowflake(idgen.LayoutTwitter, 1)
	if err != nil {
		return nil, err
	}
	add("coordkit Snowflake, Twitter 41/5+5/12", idgen.LayoutTwitter.PerSecond(), sf(ckTwitter.Next))
	bw, err := bwsnowflake.NewNode(1)
	if err != nil {
		return nil, err
	}
	add("bwmarrin/snowflake 41/10/12", 4096000, one(func() int64 { return bw.Generate().Int64() }))

	ck22, err := idgen.NewSnowflake(idgen.Layout{TimeBits: 41, SequenceBits: 22}, 0)
	if err != nil {
		return nil, err
	}
	add("coordkit Snowflake, 41/0/22 (ceiling out of reach)", 0, sf(ck22.Next))
	ck22n, _ := idgen.NewSnowflake(idgen.Layout{TimeBits: 41, SequenceBits: 22}, 0)
	var bufs sync.Pool
	bufs.New = func() any { return new([batch]int64) }
	add(fmt.Sprintf("coordkit Snowflake 41/0/22, NextN(%d)", batch), 0, func() (int64, int, error) {
		b := bufs.Get().(*[batch]int64)
		n, err := ck22n.NextN(b[:])
		last := b[batch-1]
		bufs.Put(b)
		return last, n, err
	})
	gens[len(gens)-1].per = batch

	ckSony, err := idgen.NewSnowflake(idgen.LayoutSonyflake, 1)
	if err != nil {
		return nil, err
	}
	add("coordkit Snowflake, Sonyflake 39/8/16 at 10 ms", idgen.LayoutSonyflake.PerSecond(), sf(ckSony.Next))
	sony, err := sonyflake.New(sonyflake.Settings{MachineID: func() (int, error) { return 1, nil }})
	if err != nil {
		return nil, err
	}
	add("sony/sonyflake v2 (10 ms)", 25600, sf(sony.NextID))

	oids, err := idgen.NewObjectIDGenerator()
	if err != nil {
		return nil, err
	}
	add("coordkit ObjectID", 0, one(func() int64 { return int64(oids.New().Counter()) }))
	add("rs/xid", 0, one(func() int64 { return int64(xid.New().Counter()) }))
	add("google/uuid v4", 0, func() (int64, int, error) {
		u, err := uuid.NewRandom()
		return int64(u[15]), 1, err
	})
	add("google/uuid v7", 0, func() (int64, int, error) {
		u, err := uuid.NewV7()
		return int64(u[15]), 1, err
	})
	add("oklog/ulid/v2 Make", 0, one(func() int64 { return int64(ulid.Make().Time()) }))
	return gens, nil
}

// checkCompat checks that coordkit's presets read the peers' IDs.
func checkCompat() error {
	bw, _ := bwsnowflake.NewNode(677)
	if p := idgen.LayoutWorker10.Decompose(bw.Generate().Int64()); p.Worker != 677 || time.Since(p.Time).Abs() > time.Second {
		return fmt.Errorf("idgen: LayoutWorker10 reads a bwmarrin/snowflake ID as %+v", p)
	}
	sf, err := sonyflake.New(sonyflake.Settings{
		StartTime: idgen.LayoutSonyflake.Epoch,
		MachineID: func() (int, error) { return 0xBEEF, nil },
	})
	if err != nil {
		return err
	}
	id, err := sf.NextID()
	if err != nil {
		return err
	}
	if p := idgen.LayoutSonyflake.Decompose(id); p.Worker != 0xBEEF || time.Since(p.Time).Abs() > time.Second {
		return fmt.Errorf("idgen: LayoutSonyflake reads a sonyflake ID as %+v", p)
	}
	return nil
}

// cpuTime returns the process's user+sys CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// round runs g from the given number of goroutines for d and returns IDs/s
// and CPU seconds per million IDs.
func round(g idGen, goroutines int, d time.Duration) (rate, cpuPerM float64, err error) {
	var (
		stop  atomic.Bool
		total atomic.Int64
		sum   atomic.Int64
		first atomic.Pointer[error]
		wg    sync.WaitGroup
	)
	runtime.GC()
	cpu0, t0 := cpuTime(), time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for range goroutines {
		wg.Go(func() {
			var n, bits int64
			for !stop.Load() {
				for range 64 {
					b, k, err := g.next()
					if err != nil {
						first.CompareAndSwap(nil, &err)
						stop.Store(true)
						break
					}
					n += int64(k)
					bits += b
				}
			}
			total.Add(n)
			sum.Add(bits)
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), cpuTime()-cpu0
	if e := first.Load(); e != nil {
		return 0, 0, fmt.Errorf("%s: %w", g.name, *e)
	}
	ids := float64(total.Load())
	return ids / elapsed.Seconds(), cpu.Seconds() / ids * 1e6, nil
}

type figures struct {
	rate1, cpu1, rate2, cpu2, allocs float64
}

func runIDGen(env *Env) error {
	if err := checkCompat(); err != nil {
		return err
	}
	prev := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(prev)
	gens, err := idGens()
	if err != nil {
		return err
	}
	// Rounds are interleaved (round 1 of every generator, then round 2, ...)
	// so that load drift on a shared machine hits every generator alike.
	r1, c1 := make([][]float64, len(gens)), make([][]float64, len(gens))
	r2, c2 := make([][]float64, len(gens)), make([][]float64, len(gens))
	for range env.Rounds {
		for i, g := range gens {
			rate, cpu, err := round(g, 1, env.Dur)
			if err != nil {
				return err
			}
			r1[i], c1[i] = append(r1[i], rate), append(c1[i], cpu)
			if rate, cpu, err = round(g, 2, env.Dur); err != nil {
				return err
			}
			r2[i], c2[i] = append(r2[i], rate), append(c2[i], cpu)
		}
	}
	res := make([]figures, len(gens))
	for i, g := range gens {
		allocs := testing.AllocsPerRun(1000, func() { g.next() }) / g.per
		res[i] = figures{Median(r1[i]), Median(c1[i]), Median(r2[i]), Median(c2[i]), allocs}
	}
	byName := func(prefix string) figures {
		for i, g := range gens {
			if len(g.name) >= len(prefix) && g.name[:len(prefix)] == prefix {
				return res[i]
			}
		}
		return figures{}
	}
	now := byName("time.Now")
	ns := func(rate float64) float64 { return 1e9 / rate }
	pct := func(g idGen, rate float64) string {
		if g.ceiling == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f %%", 100*rate/g.ceiling)
	}

	t := Table{
		Title: fmt.Sprintf("**One goroutine** (GOMAXPROCS=2; median of %d rounds of %v)", env.Rounds, env.Dur),
		Cols:  []string{"generator", "ns/ID", "IDs/s", "% of ceiling", "CPU s / 1M IDs", "allocs/ID", "ns vs time.Now()"},
	}
	for i, g := range gens {
		f := res[i]
		t.Row(g.name, ns(f.rate1), f.rate1, pct(g, f.rate1), f.cpu1, f.allocs, Ratio(ns(f.rate1), ns(now.rate1)))
	}
	t.Print(env.Out)

	t = Table{
		Title: fmt.Sprintf("**Two goroutines** (GOMAXPROCS=2; median of %d rounds of %v)", env.Rounds, env.Dur),
		Cols:  []string{"generator", "IDs/s", "% of ceiling", "CPU s / 1M IDs"},
	}
	for i, g := range gens {
		f := res[i]
		t.Row(g.name, f.rate2, pct(g, f.rate2), f.cpu2)
	}
	t.Print(env.Out)

	ck, bw := byName("coordkit Snowflake, Twitter"), byName("bwmarrin")
	ck22 := byName("coordkit Snowflake, 41/0/22")
	oid, x := byName("coordkit ObjectID"), byName("rs/xid")
	sony, cks := byName("sony/sonyflake"), byName("coordkit Snowflake, Sonyflake")
	v4, v7 := byName("google/uuid v4"), byName("google/uuid v7")
	t = Table{
		Title: "**Ratios** (coordkit / peer; IDs/s: higher is better, CPU and ns: lower is better)",
		Cols:  []string{"comparison", "1 goroutine", "2 goroutines"},
	}
	t.Row("Twitter layout IDs/s vs bwmarrin", Ratio(ck.rate1, bw.rate1), Ratio(ck.rate2, bw.rate2))
	t.Row("Twitter layout CPU per ID vs bwmarrin", Ratio(ck.cpu1, bw.cpu1), Ratio(ck.cpu2, bw.cpu2))
	t.Row("Sonyflake layout IDs/s vs sony/sonyflake", Ratio(cks.rate1, sony.rate1), Ratio(cks.rate2, sony.rate2))
	t.Row("Sonyflake layout CPU per ID vs sony/sonyflake", Ratio(cks.cpu1, sony.cpu1), Ratio(cks.cpu2, sony.cpu2))
	t.Row("41/0/22 ns per ID vs time.Now()", Ratio(ns(ck22.rate1), ns(now.rate1)), Ratio(ns(ck22.rate2), ns(now.rate2)))
	t.Row("ObjectID ns per ID vs rs/xid", Ratio(ns(oid.rate1), ns(x.rate1)), Ratio(ns(oid.rate2), ns(x.rate2)))
	t.Row("41/0/22 ns per ID vs rs/xid", Ratio(ns(ck22.rate1), ns(x.rate1)), Ratio(ns(ck22.rate2), ns(x.rate2)))
	t.Row("41/0/22 ns per ID vs uuid v4", Ratio(ns(ck22.rate1), ns(v4.rate1)), Ratio(ns(ck22.rate2), ns(v4.rate2)))
	t.Row("41/0/22 ns per ID vs uuid v7", Ratio(ns(ck22.rate1), ns(v7.rate1)), Ratio(ns(ck22.rate2), ns(v7.rate2)))
	t.Print(env.Out)
	return nil
}
