package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Hold is one lock.Do call, rebuilt from its events.
type Hold struct {
	ID       string
	Proc     string
	G        int
	Key      string
	Owner    string
	Invoke   int64
	Acquired int64 // 0: not obtained
	Token    int64
	Fail     string
	Lost     int64
	Release  int64 // release invoked
	Released int64 // release answered
	RelRes   string
	Last     int64 // last event of the hold
	// Outer is a re-entry's outer hold (the lock.Do it is nested in), ""
	// for an outermost lock.Do.
	Outer     string
	Read      bool    // a read-side hold (the rw backend): it shares its key with other read holds
	Late      int64   // Event.Late of its acquisition
	Until     int64   // Event.Until of its acquisition: its deadline as Obtain returned it
	lostUntil int64   // Event.Until of its loss: the deadline the holder last read (lostAtDeadline)
	untils    []Event // opUntil: its deadline read every 100 ms of a redlock long section (checkRenewalCopies)
	thin      []Event // opThin: its raised deadline less than half the raised TTL ahead (client.go, checkRaised)
	outer     *Hold
	level     bool    // a re-entry that carried its outer hold's token: one more level of it, not a hold
	levels    []*Hold // this hold's levels
	reentries []*Hold // this hold's re-entries that acquired: its levels and new holds
	invoked   bool
	events    []Event
}

// reentryAfter is when the first of h's re-entries asked for after t
// returned, or 0. One asked for before t may have run on the server before
// whatever freed the key by t did, and answered as a level of a hold that
// was still there (lock seed 1 in .ci/run at e4787f8: asked 1.5 ms before
// another owner's acquisition returned, answered 4 ms after it, under a
// lock-delete); one asked for after t ran after it.
func (h *Hold) reentryAfter(t int64) int64 {
	var at int64
	for _, r := range h.reentries {
		if r.Invoke > t && (at == 0 || r.Acquired < at) {
			at = r.Acquired
		}
	}
	return at
}

// owning is the hold a level belongs to: h's outer hold if h is a level of
// it, else h.
func (h *Hold) owning() *Hold {
	if h.level {
		return h.outer
	}
	return h
}

// reportedAt is when the holder learned that the hold was gone (Lost closed,
// or the release of the hold or of one of its levels answered "not held"),
// or 0.
func (h *Hold) reportedAt() int64 {
	at := h.Lost
	for _, l := range append([]*Hold{h}, h.levels...) {
		if l.RelRes == "notheld" && (at == 0 || l.Released < at) {
			at = l.Released
		}
	}
	return at
}

// end is when the holder stopped believing it held the lock: the release's
// invocation or the loss, whichever came first; for a process that died
// holding, its last event. A hold lasts at least as long as its levels.
func (h *Hold) end() int64 {
	e := h.ownEnd()
	for _, l := range h.levels {
		e = max(e, l.ownEnd())
	}
	return e
}

// ownEnd is end without the levels.
func (h *Hold) ownEnd() int64 {
	switch {
	case h.Release != 0 && h.Lost != 0:
		return min(h.Release, h.Lost)
	case h.Release != 0:
		return h.Release
	case h.Lost != 0:
		return h.Lost
	}
	return h.Last
}

// Input to the checkers.
type Input struct {
	Backend  string
	Life     time.Duration            // TTL, or the ZooKeeper session timeout
	KeyLife  map[string]time.Duration // keys whose lease life is not Life (the long keys)
	Events   []Event
	Faults   []Fault
	Resource *Resource
	HealedAt int64  // mono: every fault healed
	StopAt   int64  // mono: clients told to stop
	OutDir   string // where the visualization goes
}

// lifeOf is key's lease life.
func (in Input) lifeOf(key string) time.Duration {
	if d, ok := in.KeyLife[key]; ok {
		return d
	}
	return in.Life
}

// Anomaly kinds. Those in documentedKinds are counted apart when the doc
// allows them under a fault that happened and the holder was told.
const (
	aStaleWrite     = "stale-write-accepted"
	aTokenOrder     = "token-not-increasing"
	aUnknownWriter  = "unknown-writer"
	aOverlapUnrep   = "overlap-unreported"
	aOverlapUndoc   = "overlap-undocumented"
	aLostUpdate     = "lost-update"
	aNonLinear      = "not-linearizable"
	aStuck          = "key-stuck-after-heal"
	aLiveness       = "liveness-bound-exceeded"
	aMalformed      = "malformed-history"
	aReentryToken   = "reentry-token"
	aReentryNoFault = "reentry-new-hold-unexplained"
	aOverdue        = "held-past-deadline"
	aUnfair         = "fair-order-broken"
	aNotHeldUnexpl  = "release-notheld-unexplained"
	aGrantLate      = "grant-past-deadline"
	aRaisedThin     = "raised-ttl-not-kept"
	aOwnerTokens    = "owner-token-split"
	aTwinLost       = "twin-lost-unexplained"
	aNoDrift        = "validity-without-drift"
	dOverlap        = "overlap-documented-reported"
	dLostUpdate     = "lost-update-documented"
	iRefusedFresh   = "fenced-write-refused"
	iLostHolds      = "holds-lost"
	iAmbiguousAcq   = "acquire-ambiguous"
	iTimeouts       = "acquire-timeout"
	iLivenessMaxGap = "liveness-max-gap-ms"
	iDeficit        = "counter-deficit"
	iReentries      = "reentries"
	iReentryNew     = "reentry-new-hold"
	iReentryFail    = "reentry-failed"
	iStalls         = "process-stalls"
	iStallMaxMS     = "process-stall-max-ms"
	iHostStalls     = "host-stalls"
	iHostStallMaxMS = "host-stall-max-ms"
	iStallExcused   = "overlap-after-stall"
	iGrantLost      = "grant-lost-at-return"
	iThinExcused    = "raised-thin-after-fault"
	iTryRefused     = "twin-try-refused"
)

// Violation is one anomaly with the shortest excerpt of history that shows it.
type Violation struct {
	Kind    string   `json:"kind"`
	Key     string   `json:"key"`
	What    string   `json:"what"`
	Excerpt []string `json:"excerpt"`
}

// Result is what the checkers found.
type Result struct {
	Sections   int                   `json:"critical_sections"`
	Procs      int                   `json:"processes"`
	Anomalies  map[string]int        `json:"anomalies"`  // the doc says they cannot happen
	Documented map[string]int        `json:"documented"` // allowed by the doc, and reported as it promises
	Info       map[string]int64      `json:"info"`
	Linear     map[string]string     `json:"linearizable"` // per key: Ok, Illegal, Unknown
	Violations []Violation           `json:"violations,omitempty"`
	holds      map[string]*Hold      // by id
	byKey      map[string][]*Hold    // acquired holds per key, by Acquired
	pauses     map[string][][2]int64 // client pauses per process
	// selfStalls: when a process ran nothing for stallMin or more (its
	// opStall events: the host's load, or a SIGSTOP), per process.
	selfStalls map[string][][2]int64
	// stalls: when a process could not reach the servers or hear from
	// them (its connections black-holed, or their replies held: per
	// process) or the servers could not answer (paused,
	// a Redlock majority down: "" for every process).
	stalls    map[string][][2]int64
	procEnd   map[string]int64 // last event (or kill) per process
	procStart map[string]int64 // start event per process
	killed    map[string]bool  // processes the nemesis killed
}

func (r *Result) add(kind string, n int) { r.Anomalies[kind] += n }

func (r *Result) violate(kind, key, what string, hs ...*Hold) {
	r.add(kind, 1)
	if perKind := r.countViolations(kind); perKind >= 3 {
		return
	}
	r.Violations = append(r.Violations, Violation{Kind: kind, Key: key, What: what, Excerpt: excerpt(hs...)})
}

func (r *Result) countViolations(kind string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind == kind {
			n++
		}
	}
	return n
}

// excerpt is every event of the given holds (and of their re-entries), in
// time order, stamped with milliseconds from the first; cut to the events
// that show the anomaly when longer than maxExcerpt (trimExcerpt).
func excerpt(hs ...*Hold) []string {
	var evs []Event
	seen := map[*Hold]bool{}
	for _, h := range hs {
		if h == nil {
			continue
		}
		for _, x := range append([]*Hold{h}, h.reentries...) {
			if !seen[x] {
				seen[x] = true
				evs = append(evs, x.events...)
			}
		}
	}
	if len(evs) == 0 {
		return nil
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Mono < evs[j].Mono })
	t0 := evs[0].Mono
	evs, cut := trimExcerpt(evs, hs)
	var out []string
	for _, e := range evs {
		var b strings.Builder
		fmt.Fprintf(&b, "%+9.3fms %-6s %-8s %-9s %s", float64(e.Mono-t0)/1e6, e.Proc, e.Op, e.Key, e.Hold)
		if e.Token != 0 {
			fmt.Fprintf(&b, " tok=%d", e.Token)
		}
		if e.Op == opRead || e.Op == opWrite || e.Op == opWriteInv {
			fmt.Fprintf(&b, " v=%d", e.Val)
		}
		if e.Res != "" {
			fmt.Fprintf(&b, " %s", e.Res)
		}
		out = append(out, b.String())
	}
	if cut > 0 {
		out = append(out, fmt.Sprintf("(%d more events of these holds left out: invocations, reads, and writes outside the overlap)", cut))
	}
	return out
}

// maxExcerpt is the most events an excerpt shows.
const maxExcerpt = 40

// trimExcerpt cuts evs, the events of holds hs in time order, to at most
// maxExcerpt when it is longer: the acquisitions, failures, losses and
// releases, and the answered writes made while the holds overlapped (from
// the last acquisition to the first end; every write if they did not
// overlap), the middle ones of those left out if there are still too many.
// It returns the events kept and how many it left out.
func trimExcerpt(evs []Event, hs []*Hold) ([]Event, int) {
	if len(evs) <= maxExcerpt {
		return evs, 0
	}
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	for _, h := range hs {
		if h != nil && h.Acquired != 0 {
			from, to = max(from, h.Acquired), min(to, h.end())
		}
	}
	if from > to {
		from, to = math.MinInt64, math.MaxInt64
	}
	keep := make([]Event, 0, maxExcerpt)
	var writes []int // indexes into keep
	for _, e := range evs {
		switch e.Op {
		case opAcquired, opFail, opLost, opRelease, opReleased:
			keep = append(keep, e)
		case opCAS, opWrite:
			if e.Mono >= from && e.Mono <= to {
				writes = append(writes, len(keep))
				keep = append(keep, e)
			}
		}
	}
	if extra := len(keep) - maxExcerpt; extra > 0 {
		drop := map[int]bool{}
		lo := max(0, (len(writes)-extra)/2)
		for _, i := range writes[lo:min(len(writes), lo+extra)] {
			drop[i] = true
		}
		kept := keep[:0]
		for i, e := range keep {
			if !drop[i] {
				kept = append(kept, e)
			}
		}
		keep = kept
	}
	return keep, len(evs) - len(keep)
}

// Check runs every checker on in.
func Check(in Input) *Result {
	r := &Result{Anomalies: map[string]int{}, Documented: map[string]int{}, Info: map[string]int64{},
		Linear: map[string]string{}, holds: map[string]*Hold{}, byKey: map[string][]*Hold{},
		pauses: map[string][][2]int64{}, selfStalls: map[string][][2]int64{}, stalls: map[string][][2]int64{}, procEnd: map[string]int64{}, procStart: map[string]int64{}, killed: map[string]bool{}}
	r.build(in)
	r.checkTokens(in)
	r.checkReentries(in)
	r.checkLateGrants()
	if in.Backend == "sem" { // checksem.go
		r.checkPermits(in)
		r.checkSemFairness(in)
		r.checkLiveness(in)
		return r
	}
	r.checkSQLPool(in)
	r.checkSessionKills(in)
	r.checkNoExpiry(in)
	r.checkStaleWrites(in)
	pairs := r.checkOverlaps(in)
	r.checkLostUpdates(in, pairs)
	r.checkLinearizable(in)
	r.checkLiveness(in)
	r.checkReleaseAnswers(in)
	r.checkRaisedHolds(in)
	r.checkTwinLosses(in)
	r.checkRenewalCopies(in)
	r.checkRedlockValidity(in)
	if in.Backend == "fair" {
		r.checkFairness(in)
	}
	return r
}

// lostLag is how long after a lease's deadline, as the holder last read
// it, its recorded loss may be taken to have happened at that deadline:
// the watchdog closes Lost at the deadline, and the client's goroutine
// that records it may wait for a core first (11 ms seen beside another
// chaos run; a stall of stallMin or more is a process stall, which the
// checks excuse as a pause; a shorter one is not recorded, so the lag
// allowed is as long). A library that closes Lost later than this after
// its deadline still shows its overlap (mutant 07: 600 ms).
const lostLag = stallMin

// lostAtDeadline moves h's loss back to its deadline as the holder last
// read it (lostUntil) when the loss was recorded at most lostLag after it:
// the watchdog closed Lost at the deadline, and the goroutine that records
// it waited for a core. Not when the holder acted meanwhile (an event of
// its own between the deadline and the record) or its process was stopped
// over the deadline (a pause or a stall): it resumed past its lease and
// may have written before its loss was recorded (rw, long profile, seed
// 12: a holder paused 126-3045 ms, its lease ending at 3000, wrote its
// counter 44 ms after the deadline; the loss moved back hid the overlap
// that documents the lost update).
func (r *Result) lostAtDeadline(h *Hold) {
	u := h.lostUntil
	if u <= 0 || h.Lost < u || h.Lost-u > lostLag.Nanoseconds() {
		return
	}
	for _, e := range h.events {
		if e.Op != opLost && e.Mono > u && e.Mono < h.Lost {
			return
		}
	}
	for _, ss := range [][][2]int64{r.pauses[h.Proc], r.selfStalls[h.Proc]} {
		for _, p := range ss {
			if p[0] <= u && p[1] >= u {
				return
			}
		}
	}
	h.Lost = u
}

// lateSlack is how far past its own deadline a lease may be when Obtain
// has returned it: the library checks the deadline just before it
// returns (lock/doc.go: a grant answered after its TTL is never
// returned), and the goroutine may wait for a core before the client
// reads the clock.
const lateSlack = 200 * time.Millisecond

// checkLateGrants: an acquisition returned a lease whose own deadline
// (Until: the grant's send time plus its TTL) was already lateSlack
// behind, with its loss not reported: an answer that came after the
// server could have expired the grant and given it to another (reply-late
// holds replies past the TTL). A stall or pause of the process between
// the deadline and the return explains it (the library checked in time,
// then the process ran nothing). A lease returned already lost (Late -1)
// is counted apart: the locks return a lease lost by design when its
// answer was about a hold that a newer one had replaced (a Redis restarted
// from an older snapshot: lock/lease.go), and its section runs on a
// closed Lost.
func (r *Result) checkLateGrants() {
	slack := lateSlack.Nanoseconds()
	for _, id := range sortedKeys(r.holds) {
		h := r.holds[id]
		if h.Acquired == 0 || h.Late == 0 {
			continue
		}
		if h.Late < 0 {
			r.Info[iGrantLost]++
			continue
		}
		late := h.Late * int64(time.Millisecond)
		if late <= slack {
			continue
		}
		from, to := h.Acquired-late-50*int64(time.Millisecond), h.Acquired+50*int64(time.Millisecond)
		stalled := false
		for _, st := range append(append([][2]int64(nil), r.selfStalls[h.Proc]...), r.pauses[h.Proc]...) {
			if st[0] <= to && st[1] >= from {
				stalled = true
				break
			}
		}
		if !stalled {
			r.violate(aGrantLate, h.Key, fmt.Sprintf("%s's acquisition of %s returned a lease (token %d) whose own deadline had passed %d ms before, its loss not reported",
				h.ID, h.Key, h.Token, h.Late), h)
		}
	}
}

func (r *Result) build(in Input) {
	procs := map[string]bool{}
	for _, e := range in.Events {
		procs[e.Proc] = true
		r.procEnd[e.Proc] = max(r.procEnd[e.Proc], e.Mono)
		if e.Op == opStart {
			r.procStart[e.Proc] = e.Mono
		}
		if e.Op == opStall {
			r.selfStalls[e.Proc] = append(r.selfStalls[e.Proc], [2]int64{e.Mono - e.Val*int64(time.Millisecond), e.Mono})
			r.Info[iStalls]++
			r.Info[iStallMaxMS] = max(r.Info[iStallMaxMS], e.Val)
		}
		if e.Hold == "" {
			continue
		}
		h := r.holds[e.Hold]
		if h == nil {
			h = &Hold{ID: e.Hold, Proc: e.Proc, G: e.G, Key: e.Key}
			r.holds[e.Hold] = h
		}
		if h.Key != e.Key || h.Proc != e.Proc {
			r.add(aMalformed, 1)
			continue
		}
		h.events = append(h.events, e)
		h.Last = max(h.Last, e.Mono)
		switch e.Op {
		case opInvoke:
			h.Invoke, h.Owner, h.Outer, h.invoked = e.Mono, e.Owner, e.Outer, true
			h.Read = e.Mode == modeRead
		case opAcquired:
			h.Acquired, h.Token, h.Late, h.Until = e.Mono, e.Token, e.Late, e.Until
		case opFail:
			h.Fail = e.Res
			switch {
			case strings.HasSuffix(e.Hold, reentrySuffix):
				r.Info[iReentryFail]++
			case e.Key == twinKey && e.Res == "notobtained":
				r.Info[iTryRefused]++
			case e.Res == "timeout" || e.Res == "notobtained":
				r.Info[iTimeouts]++
			default:
				r.Info[iAmbiguousAcq]++
			}
		case opLost:
			if h.Lost == 0 {
				h.Lost, h.lostUntil = e.Mono, e.Until
				r.Info[iLostHolds]++
			}
		case opRelease:
			h.Release = e.Mono
		case opReleased:
			h.Released, h.RelRes = e.Mono, e.Res
		case opCAS:
			if e.Res == "refused" {
				r.Info[iRefusedFresh]++
			}
		case opThin:
			h.thin = append(h.thin, e)
		case opUntil:
			h.untils = append(h.untils, e)
		case opOverdue:
			r.violate(aOverdue, e.Key, fmt.Sprintf("%s's lease still believed it held %s %d ms after its own deadline (Until), with Lost open, and %v of running time later",
				e.Hold, e.Key, e.Val, overdueSlack))
		}
	}
	r.Procs = len(procs)
	for _, f := range in.Faults {
		if f.Err != "" {
			continue
		}
		switch f.Kind {
		case fHostStall:
			r.Info[iHostStalls]++
			r.Info[iHostStallMaxMS] = max(r.Info[iHostStallMaxMS], (f.End-f.Start)/int64(time.Millisecond))
			r.stalls[""] = append(r.stalls[""], [2]int64{f.Start, f.End})
		case fServerPause, fMajorityRestart:
			r.stalls[""] = append(r.stalls[""], [2]int64{f.Start, f.End})
		case fProxyBlackhole, fZKExpire, fReplyLate:
			r.stalls[f.Proc] = append(r.stalls[f.Proc], [2]int64{f.Start, f.End})
		}
		if f.Proc == "" {
			continue
		}
		switch f.Kind {
		case fClientPause:
			r.pauses[f.Proc] = append(r.pauses[f.Proc], [2]int64{f.Start, f.End})
		case fClientKill:
			r.procEnd[f.Proc] = max(r.procEnd[f.Proc], f.End)
			r.killed[f.Proc] = true
		}
	}
	for _, h := range r.holds {
		r.lostAtDeadline(h)
	}
	for _, h := range r.holds {
		if !h.invoked {
			r.add(aMalformed, 1) // events of a hold without its invocation
			continue
		}
		if h.Outer != "" && !r.linkReentry(h) {
			continue
		}
		if h.Acquired != 0 && !h.level {
			r.Sections++
			r.byKey[h.Key] = append(r.byKey[h.Key], h)
		}
	}
	for _, hs := range r.byKey {
		sort.Slice(hs, func(i, j int) bool { return hs[i].Acquired < hs[j].Acquired })
	}
}

// linkReentry links the re-entry h to its outer hold. A re-entry that
// carried the outer hold's token is a level of it: its events count as the
// outer hold's, and the outer hold lasts as long as its levels do. One with
// another token is a new acquisition, a hold of its own; the lock docs
// allow that only when the outer hold was lost, and promise the loss was
// reported before the new acquisition returned ("at once"), so a new token
// while the outer hold was not reported lost is a hold revived as a level
// of one Redis no longer had (issue 14, item 2). Either way the outer
// holder believed it held the key as long as the re-entry ran.
// linkReentry returns false for a malformed re-entry.
func (r *Result) linkReentry(h *Hold) bool {
	o := r.holds[h.Outer]
	if o == nil || o.Outer != "" || o.Acquired == 0 || o.Proc != h.Proc || o.Key != h.Key || h.Invoke < o.Acquired {
		r.add(aMalformed, 1)
		return false
	}
	h.outer = o
	o.Last = max(o.Last, h.Last)
	if h.Acquired == 0 {
		return true
	}
	o.reentries = append(o.reentries, h)
	if h.Token == o.Token {
		h.level = true
		o.levels = append(o.levels, h)
		r.Info[iReentries]++
		if h.Lost != 0 && (o.Lost == 0 || h.Lost < o.Lost) {
			o.Lost = h.Lost // the levels of a hold share its Lost
		}
		return true
	}
	r.Info[iReentryNew]++
	if rep := o.reportedAt(); rep == 0 || rep > h.Acquired {
		r.violate(aReentryToken, h.Key, fmt.Sprintf("%s re-entered %s with token %d while %s held it with token %d and was not told it had lost it",
			h.ID, h.Key, h.Token, o.ID, o.Token), o, h)
	}
	return true
}

// checkReentries: a re-entry that took a new hold (another token than its
// outer hold's) says the outer hold was gone from the servers. Every fault
// can take a hold (a data loss or deletion by removing it, the others by
// keeping the holder from renewing until its lease ran out), but only while
// the fault lasts or within the lease's life and the report bound after it
// ends; a fault of another client process cannot take this one's. A hold
// lost with no fault to explain it was lost by the library (a level that
// made a new hold of one Redis still had, a renewal that failed on a
// healthy server).
func (r *Result) checkReentries(in Input) {
	for _, h := range sortedHolds(r.holds) {
		o := h.outer
		if o == nil || h.level || h.Acquired == 0 {
			continue
		}
		window := in.lifeOf(h.Key).Nanoseconds() + reportBound(in, h.Key).Nanoseconds()
		explained := false
		for _, f := range in.Faults {
			if f.Err != "" || (f.Proc != "" && f.Proc != o.Proc) || !touchesHolds(f) {
				continue
			}
			if f.Start <= h.Acquired && f.End+window >= o.Acquired {
				explained = true
				break
			}
		}
		for _, st := range r.selfStalls[o.Proc] {
			// The process ran nothing for a while: its renewals did not
			// run, and the hold may have expired, as under a pause.
			explained = explained || st[0] <= h.Acquired && st[1]+window >= o.Acquired
		}
		if !explained {
			r.violate(aReentryNoFault, h.Key, fmt.Sprintf("%s re-entered %s with token %d, a new hold: %s (token %d) was gone, and no fault between its acquisition and the re-entry explains its loss",
				h.ID, h.Key, h.Token, o.ID, o.Token), o, h)
		}
	}
}

// fairSlack is how much earlier than another a waiter must have asked for
// a key before the fair lock must serve it first: the time its request
// can take to reach Redis on a loaded host.
const fairSlack = 200 * time.Millisecond

// fairWarmup: a request in a process's first fairWarmup is not judged by
// checkFairness: its first commands dial Redis and load the scripts, and a
// long fair run on a loaded host saw a new process's first request reach
// Redis more than 338 ms after a later one of another of its goroutines
// that already had a connection.
const fairWarmup = 2 * time.Second

// lockWaiterTimeout is package lock's default waiter timeout, which the
// chaos clients keep: a grant lasts min(TTL, it).
const lockWaiterTimeout = 5 * time.Second

// touchesHolds reports whether fault f can end, shorten or delay a hold or
// a command: every kind but pubsub-kill, which only loses Pub/Sub messages
// (a waiter's grant; the waiter calls in for it). The checks that ask
// whether any fault explains a loss or a late answer skip it.
func touchesHolds(f Fault) bool { return f.Kind != fPubSubKill }

// waitBounds returns, for the waiters of key on a queue served in arrival
// order (fair lock, semaphore), how long a waiter's process must have run
// nothing to have lost its turn: stall, its shortest TTL less fairSlack
// (a grant it cannot take within its grant TTL expires; a semaphore
// answer that comes after the TTL is given back, and the waiter queues
// again); and unheard, the same while a pubsub-kill lost grant messages:
// half its grant TTL less fairSlack (its call-in is due every half of
// it, and the proxies and Redis may add delays no stall records), at
// least stallMin (any stall recorded).
func waitBounds(in Input, key string, waiterTimeout time.Duration) (stall, unheard int64) {
	ttl := in.lifeOf(key)
	if _, long := in.KeyLife[key]; !long && shortTTLs(in.Backend) {
		ttl = shortTTL(ttl)
	}
	grant := min(ttl, waiterTimeout)
	return (ttl - fairSlack).Nanoseconds(), max(stallMin, grant/2-fairSlack).Nanoseconds()
}

// queuedBy is when x's request had reached the server for sure: fairSlack
// after its invocation, later by the time its process ran nothing from its
// invocation until then (a stall or pause that began before it).
func (r *Result) queuedBy(x *Hold) int64 {
	stops := append(append([][2]int64(nil), r.pauses[x.Proc]...), r.selfStalls[x.Proc]...)
	sort.Slice(stops, func(i, j int) bool { return stops[i][0] < stops[j][0] })
	t := x.Invoke + fairSlack.Nanoseconds()
	for _, s := range stops {
		if s[0] < t && s[1] > x.Invoke {
			t += s[1] - max(s[0], x.Invoke)
		}
	}
	return t
}

// checkFairness: on the fair lock, a waiter that asked for a key
// fairSlack before another is served first (lock/doc.go WithFair: FIFO,
// no barging ahead of the live queue head): a later hold that began and
// ended while the earlier waiter was still waiting is an anomaly, unless
// something may have cost the earlier waiter its turn (waiterExcused: a
// fault of its process or of the servers while it waited, from fairSlack
// before its request; its process running nothing for longer than its
// grant can wait for it, waitBounds). Re-entries never queue.
//
// A pubsub-kill is no excuse: it loses grant messages, and a waiter that
// hears none calls in at least every half of its grant TTL and takes its
// grant (lock/doc.go, Grants; mutant 39). Only a stall of the waiter's
// process while messages were being lost can have made it miss one
// (waitBounds). A later asker is one that asked after the waiter's
// request reached Redis for sure (queuedBy).
func (r *Result) checkFairness(in Input) {
	byKey := map[string][]*Hold{}
	for _, h := range r.holds {
		if h.Outer == "" && h.invoked {
			byKey[h.Key] = append(byKey[h.Key], h)
		}
	}
	for _, key := range sortedKeys(byKey) {
		hs := byKey[key]
		sort.Slice(hs, func(i, j int) bool { return hs[i].Invoke < hs[j].Invoke })
		life := in.lifeOf(key).Nanoseconds()
		stall, unheard := waitBounds(in, key, lockWaiterTimeout)
		for i, x := range hs {
			served, judged := r.served(x)
			if !judged || r.waiterExcused(in, x, served, life, stall, unheard) {
				continue
			}
			from := r.queuedBy(x)
			for _, y := range hs[i+1:] {
				if y.Invoke > served {
					break
				}
				if y.Invoke < from || y.Acquired == 0 || y.Proc == x.Proc && y.G == x.G {
					continue
				}
				if end := y.end(); end < served {
					r.violate(aUnfair, key, fmt.Sprintf("%s asked for %s %v before %s, yet %s held it and let go while %s still waited",
						x.ID, key, time.Duration(y.Invoke-x.Invoke).Round(time.Millisecond), y.ID, y.ID, x.ID), x, y)
					break
				}
			}
		}
	}
}

// served returns when waiter x stopped waiting (acquired, or gave up), and
// whether the fairness checks judge it: not a request in its process's
// first fairWarmup (dial and script load).
func (r *Result) served(x *Hold) (int64, bool) {
	if x.Invoke < r.procStart[x.Proc]+fairWarmup.Nanoseconds() {
		return 0, false
	}
	if x.Acquired != 0 {
		return x.Acquired, true
	}
	return x.Last, true
}

// waiterExcused reports whether something may have cost waiter x its turn
// in a queue served in arrival order, from its request until it was
// served: a fault of its process or of the servers (any but pubsub-kill)
// from fairSlack before its request (its queue entry was made after a
// fault over by then: none can have dropped it) until then; its process
// running nothing for stall (a grant lasts the waiter's TTL: a lease's
// life less fairSlack); or for halfGrant while grant messages may have
// been lost (a waiter that hears no grant calls in every half of its
// grant TTL): during a pubsub-kill, or after a fault over within a
// lease's life before its request (its Pub/Sub connection may still have
// been subscribing again).
func (r *Result) waiterExcused(in Input, x *Hold, served, life, stall, halfGrant int64) bool {
	unheard := false
	for _, f := range in.Faults {
		if f.Err != "" || f.Proc != "" && f.Proc != x.Proc || f.Start > served || f.End+life < x.Invoke {
			continue
		}
		if f.Kind == fPubSubKill || f.End+fairSlack.Nanoseconds() < x.Invoke {
			unheard = true
			continue
		}
		return true
	}
	return r.stoppedFor(x.Proc, x.Invoke, served, stall) ||
		unheard && r.stoppedFor(x.Proc, x.Invoke, served, halfGrant)
}

// stoppedFor reports whether proc ran nothing (a stall of its own, or a
// pause) for at least d at once between from and to.
func (r *Result) stoppedFor(proc string, from, to, d int64) bool {
	for _, ss := range [][][2]int64{r.selfStalls[proc], r.pauses[proc]} {
		for _, s := range ss {
			if min(s[1], to)-max(s[0], from) >= d {
				return true
			}
		}
	}
	return false
}

// sortedHolds returns the holds in the order of their ids.
func sortedHolds(m map[string]*Hold) []*Hold {
	hs := make([]*Hold, 0, len(m))
	for _, h := range m {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].ID < hs[j].ID })
	return hs
}

// checkTokens: every fresh acquisition's token is larger than the tokens of
// all acquisitions of its key that completed before it began.
// liveLevel reports whether b, on the twins' key, carries the token of a
// hold of its owner acquired before b asked and not released (answered)
// or lost by then: one more level of that hold (client.go, twinLoop),
// whose token another racing level of the owner may exceed
// (redlock/doc.go).
//
// Or the levels of the owner's failed round are still there: a round that
// failed (its answers late, say) releases the masters that did not answer
// in time in the background, and a later round of the owner re-enters the
// level left there until then, with the token of the hold that round
// raced or joined (redlock/doc.go, Acquire: "released in the background";
// .ci/run at 6d6a898, redlock seed 3: a twin's round timed out racing
// another, which held and released; the third twin, asked for 3 ms after
// the failure, got the released hold's token, in the quiet after the
// heal). Such a level lasts until its release lands, a TTL after its
// grant at the latest.
func (r *Result) liveLevel(in Input, hs []*Hold, b *Hold) bool {
	if b.Key != twinKey || b.Owner == "" {
		return false
	}
	for _, h := range hs {
		// Its hold stays on the servers until its release answered (a
		// re-entry through another Client may come first on them); a
		// process killed holding ends nothing.
		// A release that answered an error (Redlock: "not confirmed by
		// a quorum") may have left the hold on the masters.
		released := h.Released != 0 && h.Released <= b.Invoke && !strings.HasPrefix(h.RelRes, "error")
		ended := released || h.Lost != 0 && h.Lost <= b.Invoke
		if h != b && h.Owner == b.Owner && h.Token == b.Token && h.Acquired != 0 && h.Acquired < b.Invoke && !ended {
			return true
		}
	}
	// Rarer, and dearer (every hold of the run): a failed round's levels.
	life := in.lifeOf(b.Key).Nanoseconds()
	for _, h := range hs {
		if h == b || h.Owner != b.Owner || h.Token != b.Token || h.Acquired == 0 || h.Acquired >= b.Invoke {
			continue
		}
		for _, f := range r.holds {
			if f.Key == b.Key && f.Owner == b.Owner && f.Acquired == 0 && f.Fail != "" && f.Outer == "" &&
				(h.Released == 0 || f.Invoke < h.Released) && f.Invoke < b.Invoke && f.Last+life >= b.Invoke {
				return true
			}
		}
	}
	return false
}

func (r *Result) checkTokens(in Input) {
	for key, all := range r.byKey {
		// A read lease's token is the last write's (lock/rw.go): it names
		// the version read, shared by the readers of that version. Write
		// holds alone must get ever larger tokens.
		var hs []*Hold
		for _, h := range all {
			if !h.Read {
				hs = append(hs, h)
			}
		}
		byInvoke := append([]*Hold(nil), hs...)
		sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].Invoke < byInvoke[j].Invoke })
		var best *Hold // largest token among holds acquired so far
		i := 0
		for _, b := range byInvoke {
			for ; i < len(hs) && hs[i].Acquired < b.Invoke; i++ {
				if best == nil || hs[i].Token > best.Token {
					best = hs[i]
				}
			}
			if best != nil && b.Token <= best.Token && !r.liveLevel(in, hs, b) {
				r.violate(aTokenOrder, key, fmt.Sprintf("%s got token %d after %s had completed with token %d",
					b.ID, b.Token, best.ID, best.Token), best, b)
			}
		}
	}
}

// checkStaleWrites: no fenced write accepted after a write of a newer hold
// (one whose acquisition began after the writer's had completed).
func (r *Result) checkStaleWrites(in Input) {
	if in.Resource == nil {
		return
	}
	keys := make([]string, 0, len(in.Resource.Accepted))
	for k := range in.Resource.Accepted {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		var newest *Hold // accepted so far, with the latest invocation
		for _, w := range in.Resource.Accepted[key] {
			h := r.holds[w.Hold]
			if h == nil || h.Acquired == 0 || h.Token != w.Token {
				r.violate(aUnknownWriter, key, fmt.Sprintf("accepted write of %s (token %d) matches no acquisition", w.Hold, w.Token))
				continue
			}
			h = h.owning() // a level's write is its hold's
			// The twins' holds of one owner with one token are levels of
			// one hold (client.go, twinLoop): either's write is the hold's.
			sameHold := key == twinKey && newest != nil && newest.Owner == h.Owner && newest.Token == h.Token
			if newest != nil && newest.Invoke > h.Acquired && !sameHold {
				r.violate(aStaleWrite, key, fmt.Sprintf("%s (token %d) wrote after %s (token %d), which began to acquire after %s held",
					h.ID, h.Token, newest.ID, newest.Token, h.ID), newest, h)
			}
			if newest == nil || h.Invoke > newest.Invoke {
				newest = h
			}
		}
	}
}

// documentedFaults are the faults under which a backend's doc says two
// holders can overlap (the old one told by Lost, within reportBound): for
// the Redis locks, Redis losing the lock (restarted without it or from an
// older snapshot, its hash deleted; for Redlock, on a majority of masters)
// and a holder stopped past its lease.
func documentedFaults(backend string) map[string]bool {
	switch backend {
	case "lock", "fair", "rw", "election":
		return map[string]bool{fRestartNoData: true, fRestartSnapshot: true, fClientPause: true, fLockDelete: true}
	case "redlock":
		return map[string]bool{fRestartSnapshot: true, fMinorityRestart: true, fMajorityRestart: true, fClientPause: true, fLockDelete: true}
	case "zk":
		return map[string]bool{fClientPause: true}
	case "etcd": // etcdlock/doc.go: a holder paused past the loss (clocks aside), an operator's deletion
		return map[string]bool{fClientPause: true, fEtcdKeyDelete: true}
	case "sql": // sqllock/doc.go: a lease-table row expires under a paused holder
		return map[string]bool{fClientPause: true}
	case "sem": // semaphore/doc.go: a Redis that loses data can let more than N in
		return map[string]bool{fRestartNoData: true, fRestartSnapshot: true, fClientPause: true}
	}
	return nil
}

// reportSlack covers scheduling delays of loaded client processes.
const reportSlack = 750 * time.Millisecond

// reportBound is how long after the other holder's acquisition (or after the
// holder's process resumed) the doc lets Lost take: the Redis locks renew
// every TTL/3, and a hold that Redis lost (restarted, deleted: lock-delete)
// is reported at the next renewal at the latest (lock/doc.go,
// redlock/doc.go); the other holder acquired after the loss, so within
// TTL/3 of that. (lock's "at once" when the owner obtains the key again
// through the same Client is checked apart: linkReentry.) zklock reports
// the loss before another client can hold the lock (zklock/doc.go), and so
// does etcdlock (before the server can expire the lease, etcdlock/doc.go),
// so only a paused holder learns late, when it runs again.
func reportBound(in Input, key string) time.Duration {
	if in.Backend == "zk" || in.Backend == "etcd" {
		return reportSlack
	}
	return in.lifeOf(key)/3 + reportSlack
}

// checkOverlaps finds every pair of holds of one key whose belief intervals
// overlap, and classifies it.
func (r *Result) checkOverlaps(in Input) map[[2]string]string {
	classes := map[[2]string]string{}
	doc := documentedFaults(in.Backend)
	keys := sortedKeys(r.byKey)
	for _, key := range keys {
		bound := reportBound(in, key).Nanoseconds()
		hs := r.byKey[key]
		var active []*Hold
		for _, b := range hs {
			keep := active[:0]
			for _, a := range active {
				if a.end() > b.Acquired {
					keep = append(keep, a)
				}
			}
			active = keep
			for _, a := range active {
				if a.Read && b.Read {
					continue // readers share a key (the rw backend)
				}
				if key == twinKey && a.Owner != "" && a.Owner == b.Owner {
					// One owner's holds are levels of one hold (the
					// twins, client.go): no exclusion between them. A
					// level asked for after a's acquisition returned
					// (in process: a's token; through another Client:
					// the largest of the hold's tokens on its quorum,
					// which shares a master with a's, raised to a's
					// token) carries at least a's token, unless a's hold
					// was reported lost by the time b's acquisition
					// returned or a documented fault can have freed the
					// key between them (b then took a new hold). Rounds
					// that raced (b asked before a returned) may each
					// have been fresh on some masters, with their own
					// floors: redlock/doc.go promises no order there.
					if rep := a.reportedAt(); b.Invoke > a.Acquired && b.Token < a.Token && (rep == 0 || rep > b.Acquired+lostLag.Nanoseconds()) && !r.docFreed(in, doc, a, b) {
						r.violate(aOwnerTokens, key, fmt.Sprintf("%s (token %d), asked for after %s (token %d) of the same owner held %s, got a smaller token, and %s was not reported lost when it returned",
							b.ID, b.Token, a.ID, a.Token, key, a.ID), a, b)
					}
					continue
				}
				if a.outer == b || b.outer == a {
					// A re-entry that took a new hold while its outer hold
					// was believed held: reentry-token, or the outer hold
					// was reported lost first.
					continue
				}
				cls := r.classify(in, doc, bound, a, b)
				classes[[2]string{a.ID, b.ID}] = cls
				if cls == dOverlap {
					r.Documented[dOverlap]++
					continue
				}
				r.violate(cls, key, fmt.Sprintf("%s (token %d) held %s while %s (token %d) acquired it",
					a.ID, a.Token, key, b.ID, b.Token), a, b)
			}
			active = append(active, b)
		}
	}
	return classes
}

func (r *Result) classify(in Input, doc map[string]bool, bound int64, a, b *Hold) string {
	// Reported: one of the two holders saw Lost (or a release answered
	// "not held") within the bound after the overlap began (B's
	// acquisition), counting from its process's resumption if it was
	// stopped meanwhile. On the Redis lock, A asking to re-enter the key after B
	// acquired it must have been told by the time that re-entry returned
	// (lock/doc.go: "at once if its owner obtains the key again through the
	// same Client"); Redlock and zklock count re-entry in process.
	reported := false
	atOnce := in.Backend == "lock" || in.Backend == "fair"
	for _, h := range []*Hold{a, b} {
		other := a
		if h == a {
			other = b
		}
		if r.wipedBy(in, h, other) {
			// An operator deleted h's hold key (etcd-key-delete):
			// etcdlock/doc.go tells the holder only at Release
			// (lock.ErrNotHeld), with no bound; its belief ends there,
			// or when its process dies, or at a release that could
			// not tell (an error). A release that answered "ok" said
			// the deleted hold was there: no report.
			if h.RelRes != "ok" {
				reported = true
			}
			continue
		}
		rep := h.reportedAt()
		if (h == a || r.heldAt(b, a.Acquired)) && rep == 0 && h.Release != 0 && strings.HasPrefix(h.RelRes, "error") {
			// Released before anything could tell it (its renewals and
			// its release cut off: "not confirmed by a quorum", "the
			// hold expires after its TTL"): its belief ended at the
			// release, in time if within the bound, as a loss reported
			// then would have been. A release that answered "ok" for a
			// hold the servers no longer had is no such end: it said
			// the hold was there (hole 2, below). Only the hold a fault
			// can have taken: a's, or b's when b's replies were held
			// over a's acquisition (freed: its grant wiped while its
			// answer was out; redlock seed 2, twice); b's own quick
			// release otherwise tells a nothing.
			rep = h.Release
		}
		if rep == 0 && h.Release == 0 && r.killed[h.Proc] {
			// Killed holding: it stopped believing when it died, and
			// could not be told later; in time if it died within the
			// bound (linear.go's release of a dead holder, likewise).
			rep = r.procEnd[h.Proc]
		}
		if rep == 0 {
			continue
		}
		if h == b && b.Invoke >= a.Acquired {
			// b asked after a held: the key was free for b, so a's hold
			// is the one that was gone, and a must be told. b's own loss
			// (its hold wiped in turn) does not tell a. (Issue 29 part
			// 7: taking either report let a release that answered "ok"
			// for a deleted hold, hole 2, pass as documented; porcupine
			// alone flagged it.) A b that asked before a acquired may be
			// the stale one (stopped while its grant ran out).
			continue
		}
		from := b.Acquired
		// The holder could not learn anything while stopped, nor while
		// its renewals could not reach a server or get an answer (the
		// docs' "next renewal" is the next one that gets through, the
		// deadline at the latest; a fault that deleted its hold and one
		// that cut it off can come together). The pause's end is
		// stamped after SIGCONT returned, so the holder may report
		// before it.
		stops := append(append(append(append([][2]int64(nil), r.pauses[h.Proc]...), r.selfStalls[h.Proc]...), r.stalls[h.Proc]...), r.stalls[""]...)
		sort.Slice(stops, func(i, j int) bool { return stops[i][0] < stops[j][0] })
		for _, p := range stops {
			if p[0] <= rep && p[1] > from {
				from = max(from, min(p[1], rep))
			}
		}
		deadline := from + bound
		if at := h.reentryAfter(b.Acquired); h == a && atOnce && at != 0 {
			deadline = min(deadline, at)
		}
		if rep <= deadline {
			reported = true
		}
	}
	if !reported {
		return aOverlapUnrep
	}
	window := in.lifeOf(a.Key).Nanoseconds() + bound
	for _, f := range in.Faults {
		if f.Err == "" && doc[f.Kind] && f.Kind == fEtcdKeyDelete {
			// A round frees only the hold whose key was the first
			// under its prefix, whichever of the two it was (b's, when
			// b's grant came before the deletion and its answer after
			// a's acquisition), for an acquisition after it: a
			// waiter's key that went with it held nothing, and must
			// not hold after (mutant 42). The holder believes until
			// its release (etcdlock/doc.go), so any later acquisition
			// may overlap it.
			if r.wipes(f, a, b) || r.wipes(f, b, a) {
				return dOverlap
			}
			continue
		}
		if f.Err == "" && doc[f.Kind] && freed(f, a, b, window, r.heldAt(b, a.Acquired)) {
			return dOverlap
		}
	}
	// A process that ran nothing for a while (the host's load) is paused
	// as surely as by the nemesis's SIGSTOP: its leases' renewals did not
	// run, and one may have expired (its holder told at its deadline, or
	// when it ran again, as checked above).
	for _, h := range []*Hold{a, b} {
		for _, st := range r.selfStalls[h.Proc] {
			if doc[fClientPause] && freed(Fault{Kind: fClientPause, Proc: h.Proc, Start: st[0], End: st[1]}, a, b, window, false) {
				r.Info[iStallExcused]++
				return dOverlap
			}
		}
	}
	return aOverlapUndoc
}

// docFreed reports whether a documented fault (doc) can have freed the
// key for b while a held it (freed), within the key's life and report
// bound: a re-entry of a's owner through another Client (the twins) then
// takes a new hold on the masters, with a new token, before a is told.
func (r *Result) docFreed(in Input, doc map[string]bool, a, b *Hold) bool {
	window := in.lifeOf(a.Key).Nanoseconds() + reportBound(in, a.Key).Nanoseconds()
	for _, f := range in.Faults {
		if f.Err == "" && doc[f.Kind] && freed(f, a, b, window, r.heldAt(b, a.Acquired)) {
			return true
		}
	}
	return false
}

// freed reports whether the documented fault f can have freed the key for
// b while a believed it held it (a acquired first): the fault took the
// hold of one of them from the servers, and the other acquired after the
// fault began and within window (the lease's life and the report bound) of
// its end. For a data loss (a restart without the data or from an older
// snapshot, a deletion) the lost hold is a's, asked for before the fault
// ended; or b's, when b's replies were held up over a's acquisition
// (bHeld: heldAt) and the fault wiped b's grant while b's acquisition was
// still out (redlock seed 2: b's grant, made just before lock-delete
// began, came back 413 ms later through a black hole, still within its
// validity, after a had taken the key the deletion freed). For
// a pause it is the paused process's hold, asked for before the pause
// ended (its lease ran out while it was stopped). Any other fault, or one
// too early or too late for the pair, explains nothing: an overlap it does
// not explain is undocumented, whatever else happened in the run.
func freed(f Fault, a, b *Hold, window int64, bHeld bool) bool {
	took := func(lost, other *Hold) bool {
		return lost.Invoke <= f.End && other.Acquired >= f.Start && other.Acquired <= f.End+window
	}
	if f.Kind == fClientPause {
		switch f.Proc {
		case a.Proc:
			return took(a, b)
		case b.Proc:
			return took(b, a)
		}
		return false
	}
	if f.Kind == fEtcdKeyDelete {
		return false // round by round, in classify (Result.wipes)
	}
	return took(a, b) || bHeld && took(b, a)
}

// wipedBy reports whether an etcd-key-delete can have deleted h's hold
// key before other acquired (wipes).
func (r *Result) wipedBy(in Input, h, other *Hold) bool {
	for _, f := range in.Faults {
		if f.Kind == fEtcdKeyDelete && f.Err == "" && r.wipes(f, h, other) {
			return true
		}
	}
	return false
}

// wipes reports whether a round of the etcd-key-delete f can have deleted
// h's hold key while h held it or was being granted it: h asked before the
// round was answered, and its token was the first under the key's prefix
// (any token, for a round of unknown outcome); h's acquisition returned
// by reportSlack after the round's answer, unless its process could not
// hear meanwhile (a grant the round wiped was read before it: only a
// reply held up comes back later); and, unless other is nil, other
// acquired after the round was sent (a deletion frees the key for an
// acquisition after it, not before: mutant 42 holds before a later round
// wipes the newcomer beside it).
func (r *Result) wipes(f Fault, h, other *Hold) bool {
	for _, d := range f.Rounds {
		if r.roundWipes(d, h, other) {
			return true
		}
	}
	return false
}

// roundWipes is wipes for the round d.
func (r *Result) roundWipes(d DeleteRound, h, other *Hold) bool {
	switch {
	case h.Invoke > d.End:
	case !d.Unknown && d.Wiped[h.Key] != h.Token:
	case other != nil && other.Acquired < d.Start:
	case !d.Unknown && h.Acquired > d.End+reportSlack.Nanoseconds() && !r.heldDuring(h.Proc, d.Start, h.Acquired):
	default:
		return true
	}
	return false
}

// wipedFrom is when the first round of an etcd-key-delete that can have
// deleted h's hold key was sent (wipes), 0 if none.
func (r *Result) wipedFrom(in Input, h *Hold) int64 {
	from := int64(0)
	for _, f := range in.Faults {
		if f.Kind != fEtcdKeyDelete || f.Err != "" {
			continue
		}
		for _, d := range f.Rounds {
			if r.roundWipes(d, h, nil) && (from == 0 || d.Start < from) {
				from = d.Start
			}
		}
	}
	return from
}

// heldDuring reports whether proc could not hear from the servers at some
// moment from from to to (heldAt).
func (r *Result) heldDuring(proc string, from, to int64) bool {
	for _, ss := range [][][2]int64{r.pauses[proc], r.selfStalls[proc], r.stalls[proc], r.stalls[""]} {
		for _, p := range ss {
			if p[0] <= to && p[1] >= from {
				return true
			}
		}
	}
	return false
}

// heldAt reports whether h's process could not hear from the servers at t
// (its replies held: a black hole, late replies, a pause, a stall of its
// own, a server paused).
func (r *Result) heldAt(h *Hold, t int64) bool {
	return r.heldDuring(h.Proc, t, t)
}

// checkLostUpdates: two successful counter writes of the same value mean
// one read-modify-write overwrote another (directly, or through a stale
// writer that put an older value back in between). The lost update is
// documented when a documented, reported overlap of the key falls between
// the first writer's acquisition and the second writer's end.
func (r *Result) checkLostUpdates(in Input, classes map[[2]string]string) {
	type kv struct {
		key string
		v   int64
	}
	docOverlaps := map[string][][2]int64{} // per key: [second acquisition, first's end]
	for ids, cls := range classes {
		if cls == dOverlap {
			a, b := r.holds[ids[0]], r.holds[ids[1]]
			docOverlaps[a.Key] = append(docOverlaps[a.Key], [2]int64{b.Acquired, max(a.end(), a.Last)})
		}
	}
	writers := map[kv][]*Hold{}
	okWrites := map[string]int64{}
	for _, h := range r.holds {
		for _, e := range h.events {
			if e.Op == opWrite && e.Res == "ok" {
				writers[kv{h.Key, e.Val}] = append(writers[kv{h.Key, e.Val}], h.owning())
				okWrites[h.Key]++
			}
		}
	}
	// A stale write overwritten at once leaves no duplicate value, only a
	// counter short of the number of increments that succeeded.
	if in.Resource != nil {
		for _, key := range sortedKeys(okWrites) {
			deficit := okWrites[key] - in.Resource.Counter[key]
			if deficit <= 0 {
				continue
			}
			r.Info[iDeficit] += deficit
			if len(docOverlaps[key]) == 0 {
				r.violate(aLostUpdate, key, fmt.Sprintf("%d increments of %s succeeded, the counter holds %d, and no documented overlap explains it",
					okWrites[key], key, in.Resource.Counter[key]))
			}
		}
	}
	for _, k := range sortedKV(writers) {
		hs := writers[k]
		sort.Slice(hs, func(i, j int) bool { return hs[i].Acquired < hs[j].Acquired })
		for i := 1; i < len(hs); i++ {
			a, b := hs[i-1], hs[i]
			documented := false
			for _, o := range docOverlaps[k.key] {
				if o[0] <= max(b.end(), b.Last) && o[1] >= a.Acquired {
					documented = true
					break
				}
			}
			if documented {
				r.Documented[dLostUpdate]++
				continue
			}
			r.violate(aLostUpdate, k.key, fmt.Sprintf("%s and %s both wrote counter value %d", a.ID, b.ID, k.v), a, b)
		}
	}
}

// checkLiveness: after the faults healed, the longest time a key went
// without a new acquisition; a key never obtained again is stuck.
func (r *Result) checkLiveness(in Input) {
	if in.HealedAt == 0 || in.StopAt <= in.HealedAt {
		return
	}
	var worst int64
	for key, hs := range r.byKey {
		var gap int64
		last := in.HealedAt
		for _, h := range hs {
			if h.Acquired > in.HealedAt && h.Acquired <= in.StopAt {
				gap = max(gap, h.Acquired-last)
				last = h.Acquired
			}
		}
		if last == in.HealedAt {
			msg := fmt.Sprintf("%s not obtained in the %v after the faults healed; %s", key,
				time.Duration(in.StopAt-in.HealedAt).Round(time.Millisecond), lastHolds(hs, in.HealedAt))
			if in.Resource != nil && in.Resource.Lines != nil {
				msg += "; " + describeLine(in.Resource.Lines[key])
			}
			r.violate(aStuck, key, msg)
		}
		gap = max(gap, in.StopAt-last)
		worst = max(worst, gap)
		b := livenessBound(in.Backend, in.lifeOf(key)).Nanoseconds()
		if _, long := in.KeyLife[key]; long {
			b += longSection(in.lifeOf(key)).Nanoseconds() // a long key's section works that long
		}
		if gap > b {
			r.violate(aLiveness, key, fmt.Sprintf("%s went %v without an acquisition after the faults healed; the docs bound it by %v",
				key, time.Duration(gap).Round(time.Millisecond), time.Duration(b)))
		}
	}
	r.Info[iLivenessMaxGap] = worst / 1e6
}

// lastHolds describes, for a stuck key's report, the holds of the key
// (hs, by acquisition) that began last before the heal at healed: who held
// it, since when, and how each ended, or that it never did.
func lastHolds(hs []*Hold, healed int64) string {
	var before []*Hold
	for _, h := range hs {
		if h.Acquired != 0 && h.Acquired <= healed {
			before = append(before, h)
		}
	}
	if len(before) == 0 {
		return "never held before the heal"
	}
	before = before[max(len(before)-3, 0):]
	// rel says when t was: "… before the heal" or "… after the heal".
	rel := func(t int64) string {
		if t < healed {
			return fmt.Sprintf("%v before the heal", time.Duration(healed-t).Round(time.Millisecond))
		}
		return fmt.Sprintf("%v after the heal", time.Duration(t-healed).Round(time.Millisecond))
	}
	parts := make([]string, len(before))
	for i, h := range before {
		end := "never released nor reported lost"
		switch {
		case h.Lost != 0:
			end = "reported lost " + rel(h.Lost)
		case h.Released != 0:
			end = fmt.Sprintf("released (%s) %s", h.RelRes, rel(h.Released))
		case h.Release != 0:
			end = "release invoked " + rel(h.Release) + ", never answered"
		}
		parts[i] = fmt.Sprintf("%s (token %d) acquired %v before the heal, %s", h.ID, h.Token,
			time.Duration(healed-h.Acquired).Round(time.Millisecond), end)
	}
	return "its last holds: " + strings.Join(parts, "; ")
}

// livenessBound is how long the docs let a key of backend stay unobtainable
// once the faults have healed, with life the TTL (the session timeout for
// zk): a vanished holder frees it a TTL later and a vanished waiter is
// skipped a waiter timeout (5 s by default) after it last called in
// (lock/doc.go, redlock/doc.go); a ZooKeeper holder's node goes with its
// session, a session timeout after the server last heard of it
// (zklock/doc.go); an etcd holder's key goes with its Client's lease, a TTL
// after the server last heard of it, or at once when the Client revokes a
// lease it took as lost (etcdlock/doc.go), as zk's. Plus the clients'
// retry and scheduling slack. The quiet
// period after the heal outlasts it (run.go), so that a key not obtained
// in it is stuck beyond what the docs allow.
func livenessBound(backend string, life time.Duration) time.Duration {
	const waiterTimeout, slack = 5 * time.Second, 2 * time.Second
	if backend == "zk" || backend == "etcd" {
		return 2*life + slack
	}
	return life + waiterTimeout + slack
}

// checkReleaseAnswers: on the single-Redis locks (lock, fair, rw) and sql, a
// release that answered "not held" must have a cause: a fault that can
// have ended the hold (on a server, or on the holder's own process or
// connections) or a stall of the holder's process, from a life before its
// invocation to the answer. A lost reply is no such cause: every call of
// the Redis locks is safe to resend (lock/doc.go: "never ErrNotHeld for a
// lock it freed"), and reply-lost (nemesis.go) makes go-redis resend them;
// neither is a cut connection (proxy-cut), after which go-redis resends on
// a new one, unless the resends ran past the hold's deadline (the hold
// may have expired before one got through). On sqllock (sql) likewise, but a cut connection ends a
// session lock's session, and with it the lock (sqllock/doc.go): every
// fault on the holder's process or a server counts; a release that ends
// its own hold's session (mutant 30: its session check cancelled in
// flight) has no cause.
// slowRelease is how long a sql release may take before it counts as one
// that waited for a slow session check (checkReleaseAnswers); mutant 30's
// releases, which cancel the check, answered in under 1 ms.
const slowRelease = 100 * time.Millisecond

func (r *Result) checkReleaseAnswers(in Input) {
	redis := false
	switch in.Backend {
	case "lock", "fair", "rw":
		redis = true
	case "sql":
	default:
		return
	}
	for _, h := range sortedHolds(r.holds) {
		if h.RelRes != "notheld" || h.Acquired == 0 {
			continue
		}
		// A lease reported lost before its release stays lost, and its
		// release answers so: replies lost for longer than its TTL end
		// it at its deadline on the client's clock, though every
		// renewal ran (fair, long profile, seed 2).
		lostFirst := h.Lost != 0 && h.Lost <= h.Release
		if !redis && h.Released-h.Release > slowRelease.Nanoseconds() {
			// sqllock: the release waited for a session check in flight
			// (a slow database), which may have run past the lease's
			// deadline: the driver then closes its connection, and the
			// session ends with the lock (sqllock/doc.go).
			continue
		}
		// A release whose resends ran past the hold's deadline (the one
		// its holder last read) may have found the hold expired: its
		// requests lost with the connections that carried them, the
		// holder's renewals with them (fair, long profile, reply-lost
		// only, seed 5: a release began 117 ms before the deadline and
		// answered 23 ms after it). The hold was lost, and said so.
		expiredDuring := redis && h.lostUntil != 0 && h.Released > h.lostUntil && h.Release < h.lostUntil
		from, to := h.Invoke-in.lifeOf(h.Key).Nanoseconds(), h.Released
		explained := false
		for _, f := range in.Faults {
			if f.Err != "" || f.Proc != "" && f.Proc != h.Proc || !touchesHolds(f) {
				continue
			}
			if redis && !lostFirst && (f.Kind == fReplyLost || f.Kind == fProxyCut) &&
				!(expiredDuring && f.Start <= h.Released && f.End >= h.Release) {
				continue
			}
			if f.Start <= to && f.End >= from {
				explained = true
				break
			}
		}
		for _, s := range r.selfStalls[h.Proc] {
			explained = explained || s[0] <= to && s[1] >= from
		}
		if !explained {
			r.violate(aNotHeldUnexpl, h.Key, fmt.Sprintf("%s's release answered \"not held\" with no fault that can have ended the hold from %v before its invocation to the answer, and no stall of %s",
				h.ID, in.lifeOf(h.Key), h.Proc), h)
		}
	}
}

// redlockDrift is the drift allowance redlock/doc.go states for a lease of
// ttl: ttl·0.01 + 2 ms. The checker states it itself: it judges the
// library against its doc, so it must not take the library's own
// redlock.Drift (which mutant 12 sets to zero).
func redlockDrift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// checkRedlockValidity: a Redlock lease's deadline as Obtain returned it
// lies more than its TTL less the drift allowance after the return
// (redlock/doc.go: the lease is trusted for TTL − elapsed − drift from the
// start of its round, drift = TTL·0.01 + 2 ms, redlockDrift; the round
// started before Obtain returned, so the deadline can lie at most TTL −
// drift after that). Outermost holds only (a re-entry answers its hold's
// deadline, of the hold's TTL), with their key's TTL (the workloads'
// outermost calls ask for it). Mutant 12 dropped the drift.
func (r *Result) checkRedlockValidity(in Input) {
	if in.Backend != "redlock" {
		return
	}
	for _, h := range sortedHolds(r.holds) {
		if h.Outer != "" || h.Acquired == 0 || h.Until <= 0 {
			continue
		}
		life := in.lifeOf(h.Key)
		if ahead := time.Duration(h.Until - h.Acquired); ahead > life-redlockDrift(life)+time.Millisecond {
			r.violate(aNoDrift, h.Key, fmt.Sprintf("%s's lease returned with its deadline %v ahead, more than its TTL %v less the drift allowance %v",
				h.ID, ahead, life, redlockDrift(life)), h)
		}
	}
}

// checkTwinLosses: a twin's hold (twinKey, client.go: two goroutines of
// one owner whose TryObtain rounds race on the masters) reported lost with
// no fault on its process or a server and no stall of it within a lease
// life and the report bound before: redlock/doc.go promises that a round
// racing the owner's own hold joins it as a level, and that Lost closes
// only when the lock is no longer known to be held (mutant 28 took a
// racing round's fresh answers for a loss).
func (r *Result) checkTwinLosses(in Input) {
	for _, h := range sortedHolds(r.holds) {
		if h.Key != twinKey || h.Lost == 0 || h.Acquired == 0 || h.Release != 0 && h.Release < h.Lost {
			continue
		}
		from := h.Acquired - in.lifeOf(h.Key).Nanoseconds() - reportBound(in, h.Key).Nanoseconds()
		explained := false
		for _, f := range in.Faults {
			explained = explained || f.Err == "" && (f.Proc == "" || f.Proc == h.Proc) && f.Start <= h.Lost && f.End >= from
		}
		for _, st := range r.selfStalls[h.Proc] {
			explained = explained || st[0] <= h.Lost && st[1] >= from
		}
		if !explained {
			r.violate(aTwinLost, h.Key, fmt.Sprintf("%s, a twin's hold (owner %s), was reported lost %v after its acquisition with no fault on %s or a server and no stall of it from %v before the acquisition",
				h.ID, h.Owner, time.Duration(h.Lost-h.Acquired).Round(time.Millisecond), h.Proc, in.lifeOf(h.Key)+reportBound(in, h.Key)), h)
		}
	}
}

// checkRaisedHolds: a hold that a re-entry raised to raiseFactor times its
// key's TTL (client.go, longLoop) had less than half of the raised TTL left
// before its own deadline (thin events) with Lost open. Its renewals set
// the raised TTL every TTL/3 of the first level (lock/doc.go: the hold's
// renewals, deadline and loss follow the raised TTL), so only renewals
// that did not get through explain it: a fault on the holder's process or
// on a server, or a stall of the process, within a raised TTL before the
// event.
func (r *Result) checkRaisedHolds(in Input) {
	if !raiseChecked(in.Backend) {
		return
	}
	for _, h := range sortedHolds(r.holds) {
		unexplained := 0
		var first Event
		for _, e := range h.thin {
			from := e.Mono - (raiseFactor*in.lifeOf(h.Key) + reportSlack).Nanoseconds()
			explained := false
			for _, f := range in.Faults {
				if f.Err == "" && (f.Proc == "" || f.Proc == h.Proc) && touchesHolds(f) && f.Start <= e.Mono && f.End >= from {
					explained = true
					break
				}
			}
			for _, st := range r.selfStalls[h.Proc] {
				explained = explained || st[0] <= e.Mono && st[1] >= from
			}
			if explained {
				r.Info[iThinExcused]++
				continue
			}
			if unexplained == 0 {
				first = e
			}
			unexplained++
		}
		if unexplained == 0 {
			continue
		}
		r.add(aRaisedThin, unexplained-1) // violate counts the first
		r.violate(aRaisedThin, h.Key, fmt.Sprintf("%s, raised by a re-entry to %v, had %d ms left before its own deadline with Lost open (%d such readings), with no fault on %s or a server and no stall of it within %v before: its renewals do not keep the raised TTL",
			h.ID, raiseFactor*in.lifeOf(h.Key), first.Val, unexplained, h.Proc, raiseFactor*in.lifeOf(h.Key)+reportSlack), h)
	}
}

// sortedKV orders counter writes by key and value, for stable reports.
func sortedKV[K interface{ comparable }, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return fmt.Sprint(ks[i]) < fmt.Sprint(ks[j]) })
	return ks
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
