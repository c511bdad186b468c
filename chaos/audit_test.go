package main

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/redlock"
)

// TestExpiryAudit: a lock hash without an expiry is seen by the audit and
// counted as lock-key-without-expiry (mutant 10); one with an expiry is not.
func TestExpiryAudit(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	bare, fine := hashlock.LockKeys(hashlock.DefaultPrefix, "k0")[0], hashlock.LockKeys(hashlock.DefaultPrefix, "k1")[0]
	if err := rdb.HSet(ctx, bare, "owner", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, fine, "owner", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpire(ctx, fine, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	stop := startAudit(srv.Addr(), []string{"k0", "k1"})
	waitAudits(t, 2)
	seen := stop()
	if len(seen) == 0 {
		t.Fatal("the audit did not see the hash without an expiry")
	}
	for _, o := range seen {
		if o.Key != "k0" || o.Hash != bare {
			t.Fatalf("observation %+v, want only k0's hash %s", o, bare)
		}
	}
	r := &Result{Anomalies: map[string]int{}, Documented: map[string]int{}, Info: map[string]int64{}}
	r.checkNoExpiry(Input{Resource: &Resource{NoExpiry: seen}})
	if r.Anomalies[aNoExpiry] != len(seen) || r.countViolations(aNoExpiry) != 1 {
		t.Fatalf("anomalies %v, want %s %d in one violation", r.Anomalies, aNoExpiry, len(seen))
	}
}

// TestMarkAudit: a high-water mark stored lower than the audit's reading
// before is a drop, counted as mark-lowered (mutant 25) unless a Redis
// restart overlapped the two readings; a mark that was gone (Redis lost
// it) and came back lower is not compared.
func TestMarkAudit(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	lowered, gone := "coordkit:worker:{"+idService+"}:hw:1", "coordkit:worker:{"+idService+"}:hw:2"
	set := func(k string, v int64) {
		t.Helper()
		if err := rdb.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	set(lowered, 1_000)
	set(gone, 5_000)
	stop := startMarkAudit(srv.Addr())
	waitAudits(t, 2)
	set(lowered, 900) // a stale store that lowered it
	if err := rdb.Del(ctx, gone).Err(); err != nil {
		t.Fatal(err)
	}
	waitAudits(t, 2)
	set(gone, 4_000) // raised anew after the loss
	waitAudits(t, 2)
	drops := stop()
	if len(drops) != 1 || drops[0].Key != lowered || drops[0].From != 1_000 || drops[0].To != 900 || drops[0].Prev >= drops[0].Mono {
		t.Fatalf("drops %+v, want one of %s from 1000 to 900", drops, lowered)
	}
	d := drops[0]
	for _, tc := range []struct {
		name   string
		faults []Fault
		want   int
	}{
		{"no fault", nil, 1},
		{"a restart from a snapshot between the readings", []Fault{{Kind: fRestartSnapshot, Target: "redis0", Start: d.Prev - 1, End: d.Prev + 1}}, 0},
		{"a restart before both readings", []Fault{{Kind: fRestartNoData, Target: "redis0", Start: d.Prev - 3e9, End: d.Prev - 2e9}}, 1},
		{"a client paused between them", []Fault{{Kind: fClientPause, Proc: "s1.1", Start: d.Prev, End: d.Mono}}, 1},
	} {
		r := &Result{Anomalies: map[string]int{}, Documented: map[string]int{}, Info: map[string]int64{}}
		r.checkMarks(drops, tc.faults)
		if r.Anomalies[aMarkLowered] != tc.want || r.Documented[dMarkDataLoss] != 1-tc.want {
			t.Errorf("%s: anomalies %v, documented %v, want %s %d", tc.name, r.Anomalies, r.Documented, aMarkLowered, tc.want)
		}
	}
}

// waitAudits waits until the audit running has completed n more rounds
// (auditRounds), at most 30 s.
func waitAudits(t *testing.T, n int64) {
	t.Helper()
	want := auditRounds.Load() + n
	for deadline := time.Now().Add(30 * time.Second); auditRounds.Load() < want; time.Sleep(auditEvery / 10) {
		if time.Now().After(deadline) {
			t.Fatalf("the audit completed %d rounds in 30 s, want %d", auditRounds.Load()-want+n, n)
		}
	}
}

// TestRenewalAudit: the renewal audit reports each master's copy of a hold
// (its owner fields, not the reserved ones) with when it would expire.
func TestRenewalAudit(t *testing.T) {
	srvs := testserver.StartRedisMasters(t, 2)
	rdb := redis.NewClient(&redis.Options{Addr: srvs[0].Addr()})
	defer rdb.Close()
	ctx := context.Background()
	h := hashlock.LockKeys(redlock.DefaultPrefix, "L1")[0]
	if err := rdb.HSet(ctx, h, "o1", 1, "\x00t", 100).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpire(ctx, h, 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	before := monoNow()
	stop := startRenewalAudit([]string{srvs[0].Addr(), srvs[1].Addr()}, []string{"L0", "L1"})
	waitAudits(t, 4) // two rounds on each master at least
	copies := stop()
	after := monoNow()
	if len(copies) == 0 {
		t.Fatal("no copy seen")
	}
	for _, c := range copies {
		if c.Master != 0 || c.Key != "L1" || c.Owner != "o1" || c.Exp < before+int64(9*time.Second) || c.Exp > after+int64(10*time.Second+time.Millisecond) {
			t.Fatalf("copy %+v, want master 0's copy of L1 by o1 expiring about 10 s on", c)
		}
	}
}

// TestRenewalCopies: N − quorum masters keeping a hold shorter than its
// holder believes, at two until readings in a row, break redlock's promise
// that a hold survives one master losing its data (mutant 32), unless a
// fault or a stall explains it; one master short, or short once, does not.
func TestRenewalCopies(t *testing.T) {
	ms := func(n int64) int64 { return n * 1e6 }
	run := func(shortMasters []int, readings int, faults []Fault) *Result {
		var h hist
		h.add(0, "a", opInvoke, "L1", "a/4/1", 0, "", 0)
		h.add(1, "a", opAcquired, "L1", "a/4/1", 100, "", 0)
		var copies []MasterCopy
		for i := range int64(3) {
			at := 100 * (i + 1)
			h.evs = append(h.evs, Event{Proc: "a", Op: opUntil, Key: "L1", Hold: "a/4/1", Token: 100, Mono: ms(at), Wall: ms(at), Until: ms(3000 + at)})
			for m := range redlockMasters {
				exp := ms(3300 + at)
				if slices.Contains(shortMasters, m) && i < int64(readings) {
					exp = ms(2500)
				}
				copies = append(copies, MasterCopy{Master: m, Key: "L1", Owner: "o1", Exp: exp, Mono: ms(at + 500)})
			}
		}
		h.add(1000, "a", opRelease, "L1", "a/4/1", 100, "", 0)
		h.add(1001, "a", opReleased, "L1", "a/4/1", 100, "ok", 0)
		for i := range h.evs {
			h.evs[i].Owner = "o1"
		}
		slices.SortStableFunc(h.evs, func(x, y Event) int { return cmp.Compare(x.Mono, y.Mono) })
		return Check(Input{Backend: "redlock", Life: time.Second, KeyLife: map[string]time.Duration{"L1": 3 * time.Second},
			Events: h.evs, Faults: faults, Resource: &Resource{Copies: copies}})
	}
	for _, tc := range []struct {
		name    string
		short   []int
		reads   int
		faults  []Fault
		flagged int
	}{
		{"two masters short at three readings", []int{3, 4}, 3, nil, 2},
		{"one master short", []int{4}, 3, nil, 0},
		{"two masters short once", []int{3, 4}, 1, nil, 0},
		{"two masters short, a master paused", []int{3, 4}, 3, []Fault{{Kind: fServerPause, Target: "redis3", Start: ms(50), End: ms(80)}}, 0},
		{"two masters short, another process paused", []int{3, 4}, 3, []Fault{{Kind: fClientPause, Proc: "b", Target: "b", Start: ms(50), End: ms(80)}}, 2},
	} {
		r := run(tc.short, tc.reads, tc.faults)
		if r.Anomalies[aMastersShort] != tc.flagged {
			t.Errorf("%s: %v, want %s %d", tc.name, r.Anomalies, aMastersShort, tc.flagged)
		}
	}
}
