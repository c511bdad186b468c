package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestZKControl: a hold is served once, to the next section; an old or
// garbled line changes nothing; end closes the slow section's channel and
// drops a hold not yet served.
func TestZKControl(t *testing.T) {
	var none *zkControl
	if d, end := none.take(); d != 0 || end != nil {
		t.Fatalf("nil control: %v %v", d, end)
	}
	c := &zkControl{}
	c.apply([]byte("2 hold 3000000000"))
	d, end := c.take()
	if d != 3*time.Second || end == nil {
		t.Fatalf("take after hold: %v %v", d, end)
	}
	if d, _ := c.take(); d != 0 {
		t.Fatalf("second take: %v, want 0", d)
	}
	for _, line := range []string{"1 hold 5", "garbage", "", "x hold 5", "3 hold -1"} {
		c.apply([]byte(line))
		if d, _ := c.take(); d != 0 {
			t.Fatalf("%q: take %v, want 0", line, d)
		}
	}
	c.apply([]byte("4 ping"))
	select {
	case <-end:
		t.Fatal("ping ended the slow section")
	default:
	}
	c.apply([]byte("5 hold 7"))
	c.apply([]byte("6 end"))
	select {
	case <-end:
	default:
		t.Fatal("end did not end the slow section")
	}
	if d, _ := c.take(); d != 0 {
		t.Fatalf("take after end: %v, want 0", d)
	}
	if p := zkControlPath("s2.13"); p != "/chaos-ctl/s2" {
		t.Fatalf("control path %q", p)
	}
}

// TestHeldSince: the oldest hold acquired and not given up, from a
// history's tail and the holds seen before.
func TestHeldSince(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hist-s0.1.jsonl")
	var b []byte
	for _, e := range []Event{
		{Op: opAcquired, Hold: "a", Mono: 10}, {Op: opAcquired, Hold: "b", Mono: 20},
		{Op: opAcquired, Hold: "c", Mono: 30}, {Op: opRelease, Hold: "a", Mono: 40},
		{Op: opLost, Hold: "c", Mono: 50},
	} {
		line, _ := json.Marshal(e)
		b = append(append(b, line...), '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	open, gone := map[string]int64{}, map[string]bool{}
	if at := heldSince(path, make([]byte, 8192), open, gone); at != 20 {
		t.Fatalf("heldSince = %d, want 20", at)
	}
	// A tail that no longer shows b's acquisition still knows b.
	if at := heldSince(path, make([]byte, 60), open, gone); at != 20 {
		t.Fatalf("heldSince from a short tail = %d, want 20", at)
	}
	if at := heldSince(filepath.Join(t.TempDir(), "none"), make([]byte, 8192), map[string]int64{}, map[string]bool{}); at != 0 {
		t.Fatalf("heldSince of a missing file = %d", at)
	}
}

// TestClockSkews: seeded, within 0..4 ms, only in the ids contention mode.
func TestClockSkews(t *testing.T) {
	cfg := profiles["short"]
	cfg.backend, cfg.seed, cfg.contend = "ids", 7, false
	if s := clockSkews(cfg); s != nil {
		t.Fatalf("skews outside the contention mode: %v", s)
	}
	cfg.contend = true
	s1, s2 := clockSkews(cfg), clockSkews(cfg)
	if len(s1) != cfg.procs || !slices.Equal(s1, s2) {
		t.Fatalf("skews %v, %v: want %d, equal for one seed", s1, s2, cfg.procs)
	}
	for _, d := range s1 {
		if d < 0 || d > 4*time.Millisecond {
			t.Fatalf("skew %v outside 0..4 ms", d)
		}
	}
}

// TestPlanKinds: -kinds restricts the schedule; the zk step's silence stays
// under go-zookeeper's 2T/3 receive timeout.
func TestPlanKinds(t *testing.T) {
	cfg := profiles["short"]
	cfg.backend, cfg.seed, cfg.kinds = "zk", 5, []string{fZKNotifyPart}
	for _, s := range plan(cfg) {
		if s.Kind != fZKNotifyPart {
			t.Fatalf("kind %s planned", s.Kind)
		}
		if s.Dur < cfg.session/2 || s.Dur > cfg.session*3/5 || s.Target < 0 || s.Target >= cfg.procs {
			t.Fatalf("step %+v", s)
		}
	}
}

// TestCombine: a quarter of the steps (about) run with the next one, never
// two faults on one client process nor two on the servers, at most two at
// once, and the steps themselves stay what the seed drew.
func TestCombine(t *testing.T) {
	cfg := profiles["long"]
	cfg.backend, cfg.seed = "lock", 3
	steps := plan(cfg)
	with := 0
	for i, s := range steps {
		if !s.With {
			continue
		}
		with++
		n := steps[i+1]
		if n.With {
			t.Fatalf("steps %d and %d both run with the next: three at once", i, i+1)
		}
		if clientFault(s.Kind) == clientFault(n.Kind) && (!clientFault(s.Kind) || s.Target == n.Target) {
			t.Fatalf("step %d (%s #%d) combined with %s #%d", i, s.Kind, s.Target, n.Kind, n.Target)
		}
	}
	if with < len(steps)/10 || with > len(steps)/3 {
		t.Fatalf("%d of %d steps combined, want about a quarter", with, len(steps))
	}
	again := plan(cfg)
	for i := range steps {
		if steps[i] != again[i] {
			t.Fatalf("step %d differs between two plans of one seed", i)
		}
	}
}
