package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

// TestIDFileRoundTrip writes blocks from two writers, reads them back, and
// checks that a torn last block is dropped and a bad marker is an error.
func TestIDFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids-a.bin")
	f, err := CreateIDFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type block struct {
		h   BlockHeader
		ids []int64
	}
	var want []block
	w1, w2 := f.NewBlockWriter(100), f.NewBlockWriter(1<<20) // w1 writes at once, w2 on Flush
	for i := range 5 {
		h := BlockHeader{Part: partRedis, G: 1, Lease: 3, Worker: 1023, Start: int64(i) * 1e6, End: int64(i)*1e6 + 5}
		ids := []int64{int64(i), -1, 1<<63 - 1, int64(i) << 40}
		if err := w1.Add(h, ids); err != nil {
			t.Fatal(err)
		}
		h.Count = uint32(len(ids))
		want = append(want, block{h, ids})
	}
	if err := w1.Flush(); err != nil {
		t.Fatal(err)
	}
	seg := BlockHeader{Part: partSeg, G: 2, Worker: -1, Start: 7, End: 9}
	if err := w2.Add(seg, []int64{42}); err != nil {
		t.Fatal(err)
	}
	seg.Count = 1
	want = append(want, block{seg, []int64{42}})
	if err := w2.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	read := func() ([]block, error) {
		var got []block
		err := ReadIDFile(path, func(h BlockHeader, ids []int64) error {
			got = append(got, block{h, slices.Clone(ids)})
			return nil
		})
		return got, err
	}
	same := func(got, want []block) bool {
		return slices.EqualFunc(got, want, func(a, b block) bool { return a.h == b.h && slices.Equal(a.ids, b.ids) })
	}
	got, err := read()
	if err != nil || !same(got, want) {
		t.Fatalf("read %+v, %v; want %+v", got, err, want)
	}

	// A kill in the middle of the last write: the torn block is dropped.
	st, _ := os.Stat(path)
	if err := os.Truncate(path, st.Size()-3); err != nil {
		t.Fatal(err)
	}
	if got, err = read(); err != nil || !same(got, want[:len(want)-1]) {
		t.Fatalf("torn: read %d blocks, %v; want %d", len(got), err, len(want)-1)
	}
	// A header cut short, too.
	if err := os.Truncate(path, st.Size()-8-blockHeadSize+10); err != nil {
		t.Fatal(err)
	}
	if got, err = read(); err != nil || !same(got, want[:len(want)-1]) {
		t.Fatalf("torn header: read %d blocks, %v; want %d", len(got), err, len(want)-1)
	}

	// A damaged marker inside the file is not a torn tail.
	b, _ := os.ReadFile(path)
	b[len(idMagic)+blockHeadSize+4*8] ^= 0xff // the second block's marker
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := read(); err == nil || !strings.Contains(err.Error(), "marker") {
		t.Fatalf("damaged marker: %v, want an error", err)
	}
	if err := os.WriteFile(path, []byte("not an ID file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := read(); err == nil {
		t.Fatal("a file without the magic string was read")
	}
}

// idHist builds an ids run in a temp dir: history events, ID blocks and faults.
type idHist struct {
	t      *testing.T
	dir    string
	evs    []Event
	faults []Fault
	files  map[string]*BlockWriter
	open   []*IDFile
}

func newIDHist(t *testing.T) *idHist {
	return &idHist{t: t, dir: t.TempDir(), files: map[string]*BlockWriter{}}
}

// ms is n ms on the histories' monotonic clock (which starts well above 0).
func ms(n int64) int64 { return (n + 1000) * 1e6 }

func (h *idHist) ev(at int64, proc, op, part string, lease int, worker int64, res string) {
	h.evs = append(h.evs, Event{Proc: proc, Op: op, Part: part, Lease: lease, Worker: worker, Res: res,
		Mono: ms(at), Wall: ms(at)})
}

// lease records a lease of worker by proc at ms, and its end (lost or
// released) at end (0: the process died holding it).
func (h *idHist) lease(proc, part string, n int, worker, at, end int64, lost bool) {
	h.ev(at, proc, opLease, part, n, worker, "")
	h.ev(at+1, proc, opGenStart, part, n, worker, "")
	switch {
	case end == 0:
	case lost:
		h.ev(end, proc, opLeaseLost, part, n, worker, "error: lost")
		h.ev(end+1, proc, opLeaseRelease, part, n, worker, "")
		h.ev(end+2, proc, opLeaseReleased, part, n, worker, "ok")
	default:
		h.ev(end, proc, opLeaseRelease, part, n, worker, "")
		h.ev(end+1, proc, opLeaseReleased, part, n, worker, "ok")
	}
}

// sf returns the Snowflake ID of worker at tick t (ms after 2025-01-01) with sequence seq.
func sf(t *testing.T, worker, tick, seq int64) int64 {
	t.Helper()
	id, err := idLayout.Compose(idgen.Parts{Time: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(tick) * time.Millisecond),
		Worker: worker, Sequence: seq})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// block records ids issued by proc's lease n of part in a call from start to end (ms).
func (h *idHist) block(proc string, part uint8, n int, worker, start, end int64, ids ...int64) {
	w := h.files[proc]
	if w == nil {
		f, err := CreateIDFile(filepath.Join(h.dir, "ids-"+proc+".bin"))
		if err != nil {
			h.t.Fatal(err)
		}
		h.open = append(h.open, f)
		w = f.NewBlockWriter(1 << 20)
		h.files[proc] = w
	}
	if err := w.Add(BlockHeader{Part: part, Lease: uint32(n), Worker: worker, Start: ms(start), End: ms(end)}, ids); err != nil {
		h.t.Fatal(err)
	}
}

func (h *idHist) check() *Result {
	for _, w := range h.files {
		if err := w.Flush(); err != nil {
			h.t.Fatal(err)
		}
	}
	for _, f := range h.open {
		f.Close()
	}
	slices.SortStableFunc(h.evs, func(a, b Event) int { return int(a.Mono - b.Mono) })
	r, err := CheckIDs(IDInput{Events: h.evs, Faults: h.faults, Dir: h.dir})
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func TestCheckIDs(t *testing.T) {
	tests := []struct {
		name       string
		build      func(t *testing.T, h *idHist)
		anomalies  []string
		documented []string
	}{
		{name: "clean", build: func(t *testing.T, h *idHist) {
			// a holds worker 0, loses it, b takes it over and starts above a's IDs.
			h.lease("a", "zk", 1, 0, 0, 100, true)
			h.block("a", partZK, 1, 0, 10, 11, sf(t, 0, 10, 0), sf(t, 0, 10, 1), sf(t, 0, 11, 0))
			h.lease("b", "zk", 1, 0, 200, 0, false)
			h.block("b", partZK, 1, 0, 210, 211, sf(t, 0, 210, 0), sf(t, 0, 210, 1))
			// The same value on the other part (another service) is no duplicate.
			h.lease("a", "redis", 1, 0, 0, 0, false)
			h.block("a", partRedis, 1, 0, 10, 11, sf(t, 0, 10, 0))
			h.block("a", partSeg, 0, -1, 5, 6, 1, 2, 3)
			h.block("b", partSeg, 0, -1, 5, 6, 4, 5, 6)
		}},
		{name: "duplicate after a clean hand-over", build: func(t *testing.T, h *idHist) {
			h.lease("a", "zk", 1, 0, 0, 100, true)
			h.block("a", partZK, 1, 0, 10, 11, sf(t, 0, 10, 0), sf(t, 0, 10, 1))
			h.lease("b", "zk", 1, 0, 200, 0, false)
			h.block("b", partZK, 1, 0, 210, 211, sf(t, 0, 10, 1), sf(t, 0, 10, 2)) // a generator that started below a's IDs
		}, anomalies: []string{aDuplicate}},
		{name: "duplicate within one generator", build: func(t *testing.T, h *idHist) {
			h.lease("a", "redis", 1, 3, 0, 0, false)
			h.block("a", partRedis, 1, 3, 10, 11, sf(t, 3, 10, 0))
			h.block("a", partRedis, 1, 3, 12, 13, sf(t, 3, 10, 0))
		}, anomalies: []string{aDuplicate}},
		{name: "duplicate after Redis lost the lease key", build: func(t *testing.T, h *idHist) {
			h.lease("a", "redis", 1, 0, 0, 300, true)
			h.block("a", partRedis, 1, 0, 10, 11, sf(t, 0, 10, 0))
			h.block("a", partRedis, 1, 0, 250, 251, sf(t, 0, 250, 0))
			h.faults = append(h.faults, Fault{Kind: fRestartNoData, Target: "redis0", Start: ms(100), End: ms(150)})
			h.lease("b", "redis", 1, 0, 200, 0, false)
			h.block("b", partRedis, 1, 0, 250, 251, sf(t, 0, 250, 0))
		}, documented: []string{dDupDataLoss, dHandDataLoss}},
		{name: "the same on ZooKeeper is not documented", build: func(t *testing.T, h *idHist) {
			h.lease("a", "zk", 1, 0, 0, 300, true)
			h.block("a", partZK, 1, 0, 10, 11, sf(t, 0, 10, 0))
			h.block("a", partZK, 1, 0, 250, 251, sf(t, 0, 250, 0))
			h.faults = append(h.faults, Fault{Kind: fRestartNoData, Target: "redis0", Start: ms(100), End: ms(150)})
			h.lease("b", "zk", 1, 0, 200, 0, false)
			h.block("b", partZK, 1, 0, 250, 251, sf(t, 0, 250, 0))
		}, anomalies: []string{aDuplicate, aAfterHandover}},
		{name: "paused holder", build: func(t *testing.T, h *idHist) {
			h.lease("a", "zk", 1, 0, 0, 3010, true)
			h.block("a", partZK, 1, 0, 10, 11, sf(t, 0, 10, 0))
			h.faults = append(h.faults, Fault{Kind: fClientPause, Proc: "a", Target: "a", Start: ms(20), End: ms(3000)})
			h.lease("b", "zk", 1, 0, 2500, 0, false)
			h.block("b", partZK, 1, 0, 3001, 3002, sf(t, 0, 3001, 0))
			h.block("a", partZK, 1, 0, 3005, 3006, sf(t, 0, 3001, 0)) // a call begun on resumption, before a learned of the loss
		}, anomalies: []string{aDuplicate, aAfterHandover}}, // the generator checks the deadline: not allowed
		{name: "ID after the loss was reported", build: func(t *testing.T, h *idHist) {
			h.lease("a", "redis", 1, 2, 0, 100, true)
			h.block("a", partRedis, 1, 2, 10, 11, sf(t, 2, 10, 0))
			h.block("a", partRedis, 1, 2, 120, 121, sf(t, 2, 120, 0))
		}, anomalies: []string{aAfterLoss}},
		{name: "call begun before the loss may end after it", build: func(t *testing.T, h *idHist) {
			h.lease("a", "redis", 1, 2, 0, 100, true)
			h.block("a", partRedis, 1, 2, 99, 105, sf(t, 2, 99, 0))
		}},
		{name: "call begun while Release runs", build: func(t *testing.T, h *idHist) {
			h.lease("a", "zk", 1, 2, 0, 100, false) // release invoked at 100, returned at 101
			h.block("a", partZK, 1, 2, 100, 102, sf(t, 2, 100, 0))
		}},
		{name: "call begun after Release returned", build: func(t *testing.T, h *idHist) {
			h.lease("a", "zk", 1, 2, 0, 100, false)
			h.block("a", partZK, 1, 2, 102, 103, sf(t, 2, 102, 0))
		}, anomalies: []string{aAfterLoss}},
		{name: "call on a worker ID another process leased", build: func(t *testing.T, h *idHist) {
			h.lease("a", "zk", 1, 4, 0, 0, false) // never told
			h.block("a", partZK, 1, 4, 10, 11, sf(t, 4, 10, 0))
			h.lease("b", "zk", 1, 4, 100, 0, false)
			h.block("a", partZK, 1, 4, 150, 151, sf(t, 4, 150, 0))
			h.block("b", partZK, 1, 4, 160, 161, sf(t, 4, 160, 0))
		}, anomalies: []string{aAfterHandover}},
		{name: "worker bits not the lease's", build: func(t *testing.T, h *idHist) {
			h.lease("a", "zk", 1, 4, 0, 0, false)
			h.block("a", partZK, 1, 4, 10, 11, sf(t, 5, 10, 0))
		}, anomalies: []string{aWrongWorker}},
		{name: "IDs under a lease the history lacks", build: func(t *testing.T, h *idHist) {
			h.block("a", partZK, 7, 4, 10, 11, sf(t, 4, 10, 0))
		}, anomalies: []string{aUnknownLease}},
		{name: "segments: duplicate across processes", build: func(t *testing.T, h *idHist) {
			h.block("a", partSeg, 0, -1, 5, 6, 1, 2, 3)
			h.block("b", partSeg, 0, -1, 7, 8, 3, 4)
		}, anomalies: []string{aDuplicate}},
		{name: "segments: duplicate across processes after a data loss", build: func(t *testing.T, h *idHist) {
			h.block("a", partSeg, 0, -1, 5, 6, 1, 2, 3)
			h.faults = append(h.faults, Fault{Kind: fRestartSnapshot, Target: "redis0", Start: ms(6), End: ms(9)})
			h.block("b", partSeg, 0, -1, 10, 11, 3, 4)
		}, documented: []string{dSegDataLoss}},
		{name: "segments: duplicate within a process after a data loss", build: func(t *testing.T, h *idHist) {
			h.block("a", partSeg, 0, -1, 5, 6, 1, 2, 3)
			h.faults = append(h.faults, Fault{Kind: fRestartNoData, Target: "redis0", Start: ms(6), End: ms(9)})
			h.block("a", partSeg, 0, -1, 10, 11, 3, 4)
		}, anomalies: []string{aDuplicate}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newIDHist(t)
			tt.build(t, h)
			r := h.check()
			if got := kindsOf(r.Anomalies); !slices.Equal(got, sorted(tt.anomalies)) {
				t.Errorf("anomalies %v, want %v; violations %+v", r.Anomalies, tt.anomalies, r.Violations)
			}
			if got := kindsOf(r.Documented); !slices.Equal(got, sorted(tt.documented)) {
				t.Errorf("documented %v, want %v", r.Documented, tt.documented)
			}
			if r.Info[iIDs] == 0 {
				t.Error("no IDs counted")
			}
		})
	}
}

// TestCheckIDsCountsEveryDuplicate: many duplicated values, across parts,
// are each counted once, and a value issued three times is one value.
func TestCheckIDsCountsEveryDuplicate(t *testing.T) {
	h := newIDHist(t)
	h.lease("a", "zk", 1, 1, 0, 0, false)
	h.lease("b", "zk", 1, 1, 0, 0, false) // both told they hold worker 1: a leaser bug
	var ids []int64
	for i := range int64(1000) {
		ids = append(ids, sf(t, 1, 100+i/10, i%10))
	}
	h.block("a", partZK, 1, 1, 10, 11, ids...)
	h.block("b", partZK, 1, 1, 12, 13, ids[:500]...)
	h.block("b", partZK, 1, 1, 14, 15, ids[:1]...)
	r := h.check()
	if r.Anomalies[aDuplicate] != 500 || r.Info[iDupValues] != 501 {
		t.Fatalf("duplicates %d (values %d), want 500 values flagged (501 repeats)", r.Anomalies[aDuplicate], r.Info[iDupValues])
	}
	if n := r.countViolations(aDuplicate); n != 3 {
		t.Fatalf("%d duplicate excerpts, want 3 (the first ones)", n)
	}
	for _, v := range r.Violations {
		if len(v.Excerpt) == 0 {
			t.Fatalf("violation without an excerpt: %+v", v)
		}
	}
	if r.Info[iIDs] != 1501 || r.Procs != 2 {
		t.Fatalf("ids %d, procs %d", r.Info[iIDs], r.Procs)
	}
}

func TestControlFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl-s0")
	if seq, off, err := readControl(path); seq != 0 || off != 0 || err != nil {
		t.Fatalf("missing file: %d %d %v", seq, off, err)
	}
	if err := writeControl(path, 3, -int64(750*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if seq, off, err := readControl(path); seq != 3 || off != -int64(750*time.Millisecond) || err != nil {
		t.Fatalf("read %d %d %v", seq, off, err)
	}
	os.WriteFile(path, []byte("garbage"), 0o644)
	if _, _, err := readControl(path); err == nil {
		t.Fatal("garbage read as a control line")
	}
}

// TestPlanIDs: the ids backend's schedule holds every kind, clock steps
// within 1 ms to 1 s both ways.
func TestPlanIDs(t *testing.T) {
	cfg := profiles["long"]
	cfg.backend, cfg.seed, cfg.procs = "ids", 3, 4
	seen := map[string]bool{}
	back, fwd := 0, 0
	for _, s := range plan(cfg) {
		seen[s.Kind] = true
		if s.Kind == fClockStep {
			if a := s.Step.Abs(); a < time.Millisecond || a > time.Second {
				t.Fatalf("step %v outside 1 ms .. 1 s", s.Step)
			}
			if s.Step < 0 {
				back++
			} else {
				fwd++
			}
		}
	}
	for _, k := range faultKinds("ids") {
		if !seen[k] {
			t.Errorf("kind %s not planned", k)
		}
	}
	if back == 0 || fwd == 0 {
		t.Errorf("clock steps: %d back, %d forward", back, fwd)
	}
}

func kindsOf[V int | int64](m map[string]V) []string {
	var out []string
	for k, v := range m {
		if v > 0 {
			out = append(out, k)
		}
	}
	return sorted(out)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	if s == nil {
		s = []string{}
	}
	return s
}
