package main

import (
	"testing"
	"time"
)

// TestHostStallExplains: the orchestrator's stalls (host-stall, recorded
// by watchHostStalls: every proxy stood still) explain what a stall of
// every connection explains, and a client process's own stall explains a
// re-entry's new hold as it explains a release's "not held". Each case
// flagged an anomaly without the stall (found by a review of the checker
// for rules that take the time a client saw for the time a server acted).
func TestHostStallExplains(t *testing.T) {
	hostStall := func(from, to int64) []Fault {
		return []Fault{{Kind: fHostStall, Target: "orchestrator", Start: from * 1e6, End: to * 1e6}}
	}
	for _, c := range []struct {
		name    string
		backend string
		build   func(h *hist)
		faults  []Fault // the stall that explains it
		kind    string  // what it is without the stall
	}{
		{"release not held after the proxies stood still", "lock", func(h *hist) {
			h.section(3000, 4500, "a", "k0", "a/0/1", 100, 0, "notheld")
		}, hostStall(3100, 4300), aNotHeldUnexpl},
		{"fair request carried late by the proxies", "fair", func(h *hist) {
			h.add(0, "x", opStart, "", "", 0, "", 0)
			h.add(0, "y", opStart, "", "", 0, "", 0)
			h.waiting(3000, 3400, 3410, "x", "k0", "x/0/1", 102, 1)
			h.waiting(3250, 3380, 3390, "y", "k0", "y/0/1", 101, 0)
		}, hostStall(2990, 3300), aUnfair},
		{"re-entry's new hold after the process stalled past its TTL", "lock", func(h *hist) {
			h.outerStart(10000, "a", "k0", "a/0/1", 100, 0)
			h.evs = append(h.evs, Event{Proc: "a", Op: opStall, Val: 1295, Mono: 11300e6})
			h.evs = append(h.evs, Event{Proc: "a", Op: opLost, Key: "k0", Hold: "a/0/1", Token: 100, Mono: 11300.5e6})
			h.reentry(11301, 11310, "a", "k0", "a/0/1", 200, "ok")
			h.outerEnd(11320, "a", "k0", "a/0/1", 100, "refused", "notheld")
		}, nil, aReentryNoFault},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h hist
			c.build(&h)
			r := Check(Input{Backend: c.backend, Life: time.Second, Events: h.evs, Faults: c.faults})
			if n := r.Anomalies[c.kind]; n != 0 {
				t.Errorf("%s %d with the stall: %v", c.kind, n, r.Violations)
			}
			if c.faults == nil {
				return // the stall is in the history itself
			}
			r = Check(Input{Backend: c.backend, Life: time.Second, Events: h.evs})
			if r.Anomalies[c.kind] == 0 {
				t.Errorf("without the stall: no %s (anomalies %v): the case tests nothing", c.kind, r.Anomalies)
			}
		})
	}
}

// TestFailedTwinRoundLeavesLevel: a twin's round that failed (its answers
// late) leaves levels of the owner's hold on the masters until their
// background release lands; the next twin's round, asked for 3 ms after
// the failure, re-enters them and gets the token of the hold that round
// raced, although that hold was released (.ci/run at 6d6a898, redlock
// seed 3, in the quiet after the heal). Without the failed round, the same
// token is token-not-increasing.
func TestFailedTwinRoundLeavesLevel(t *testing.T) {
	build := func(failed bool) []Event {
		var h hist
		if failed {
			h.add(0, "a", opInvoke, twinKey, "a/6/1", 0, "", 0)
			h.evs[len(h.evs)-1].Owner = "o1"
		}
		h.twin(1, 2, 13, "a/7/1", 100, "ok")
		if failed {
			h.add(24, "a", opFail, twinKey, "a/6/1", 0, "timeout", 0)
		}
		h.twin(25, 28, 40, "a/8/1", 100, "ok")
		return h.evs
	}
	r := Check(Input{Backend: "redlock", Life: time.Second, Events: build(true)})
	if n := r.Anomalies[aTokenOrder]; n != 0 {
		t.Errorf("%s %d after the failed round: %v", aTokenOrder, n, r.Violations)
	}
	r = Check(Input{Backend: "redlock", Life: time.Second, Events: build(false)})
	if r.Anomalies[aTokenOrder] == 0 {
		t.Errorf("without the failed round: no %s (anomalies %v)", aTokenOrder, r.Anomalies)
	}
}
