package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Anomalies of the ids backend. The doc-allowed kinds (counted apart, not
// failures) are those of workerid's doc.go ("Failover and data loss": a
// Redis lease is exclusive only while Redis keeps its key, and a mark lost
// with the data does not protect the newcomer) and redisid's ("Rollback":
// duplicates across processes after a Redis data loss). A holder stopped
// across its lease's deadline is not among them: its generator checks the
// deadline after every clock reading and issues nothing on resumption.
const (
	aDuplicate     = "duplicate-id"      // one ID handed out twice, under no fault a doc allows it for
	aAfterLoss     = "id-after-loss"     // a generator call began after its process saw the lease's Lost close
	aAfterHandover = "id-after-handover" // a call on a worker ID began after another process had leased that ID
	aWrongWorker   = "id-wrong-worker"   // a Snowflake ID whose worker bits are not the leased worker ID
	aUnknownLease  = "id-unknown-lease"  // IDs recorded under a lease the history does not show
	dDupDataLoss   = "duplicate-redis-data-loss"
	dSegDataLoss   = "duplicate-segment-data-loss"
	dHandDataLoss  = "handover-redis-data-loss"
	dMarkDataLoss  = "mark-lowered-redis-data-loss" // a high-water mark rolled back by a Redis restart (audit.go)
	iIDs           = "ids"
	iLeases        = "leases"
	iLeasesLost    = "leases-lost"
	iClockSteps    = "clock-steps-applied"
	iClockBack     = "clock-backwards-errors"
	iDupValues     = "duplicate-values"
)

// idLease is one lease of a worker ID by one process, rebuilt from its events
// and the headers of its blocks.
type idLease struct {
	Proc      string
	Part      string
	N         int
	Worker    int64
	Acquired  int64
	Lost      int64 // Lost closed (not by Release), or 0
	Release   int64 // Release invoked, or 0
	Released  int64 // Release returned, or 0
	Blocks    int
	IDs       int64
	LastStart int64 // the latest call the lease's generator began
	events    []Event
}

func leaseKey(proc, part string, n int) string { return fmt.Sprintf("%s/%s/%d", proc, part, n) }

// issuer is one block that holds a duplicated ID.
type issuer struct {
	proc       string
	h          BlockHeader
	start, end int64
}

// IDInput is what the ID checkers read: the histories, the fault log, and
// the ID files (ids-<proc>.bin) in Dir.
type IDInput struct {
	Events []Event
	Faults []Fault
	Dir    string
	Marks  []MarkDrop // the high-water audit's drops (audit.go)
}

// CheckIDs runs the ID checkers: duplicates (by sorting every part's IDs),
// IDs issued after the issuing lease was reported lost, calls on a worker ID
// begun after another process leased it, and worker bits that are not the
// lease's.
func CheckIDs(in IDInput) (*Result, error) {
	r := &Result{Anomalies: map[string]int{}, Documented: map[string]int{}, Info: map[string]int64{},
		Linear: map[string]string{}}
	leases := map[string]*idLease{}
	procs := map[string]bool{}
	for _, e := range in.Events {
		procs[e.Proc] = true
		switch e.Op {
		case opClockStep:
			if e.Val != 0 {
				r.Info[iClockSteps]++
			}
		case opGenErr:
			if strings.HasSuffix(e.Res, "clock-backwards") {
				r.Info[iClockBack]++
			}
		}
		if e.Lease == 0 || e.Part == "" {
			continue
		}
		k := leaseKey(e.Proc, e.Part, e.Lease)
		l := leases[k]
		if l == nil {
			l = &idLease{Proc: e.Proc, Part: e.Part, N: e.Lease, Worker: e.Worker}
			leases[k] = l
		}
		l.events = append(l.events, e)
		switch e.Op {
		case opLease:
			l.Acquired = e.Mono
			r.Info[iLeases]++
		case opLeaseLost:
			if l.Lost == 0 {
				l.Lost = e.Mono
				r.Info[iLeasesLost]++
			}
		case opLeaseRelease:
			l.Release = e.Mono
		case opLeaseReleased:
			l.Released = e.Mono
		}
	}
	r.Procs = len(procs)
	for _, l := range leases {
		if l.Acquired == 0 {
			r.add(aMalformed, 1) // lease events without the lease
		}
	}
	r.checkMarks(in.Marks, in.Faults)

	files, err := filepath.Glob(filepath.Join(in.Dir, "ids-*.bin"))
	if err != nil {
		return nil, err
	}
	if err := idLayout.Validate(); err != nil {
		return nil, err
	}
	var total int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			total += st.Size() / 8
		}
	}
	byPart := map[uint8][]int64{}
	for p := range partNames {
		byPart[p] = make([]int64, 0, total/int64(len(partNames))+1)
	}
	for _, name := range files {
		proc := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(name), "ids-"), ".bin")
		err := ReadIDFile(name, func(h BlockHeader, ids []int64) error {
			byPart[h.Part] = append(byPart[h.Part], ids...)
			r.Info[iIDs] += int64(len(ids))
			r.Info[iIDs+"-"+partNames[h.Part]] += int64(len(ids))
			if segmentPart(h.Part) {
				return nil
			}
			r.checkBlock(leases, proc, h, ids)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	r.checkHandovers(in, leases)

	dups := map[int64]int{}
	for _, p := range idParts() {
		ids := byPart[p]
		slices.Sort(ids)
		for i := 1; i < len(ids); i++ {
			if ids[i] == ids[i-1] {
				r.Info[iDupValues]++
				r.Info[iDupValues+"-"+partNames[p]]++
				if len(dups) < 1<<20 {
					dups[ids[i]] |= 1 << p
				}
			}
		}
		byPart[p] = nil
	}
	if len(dups) > 0 {
		if err := r.classifyDups(in, leases, files, dups); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// checkBlock checks one block of a Snowflake part against its lease.
func (r *Result) checkBlock(leases map[string]*idLease, proc string, h BlockHeader, ids []int64) {
	part := partNames[h.Part]
	l := leases[leaseKey(proc, part, int(h.Lease))]
	if l == nil || l.Acquired == 0 || l.Worker != h.Worker {
		r.violateIDs(aUnknownLease, part, fmt.Sprintf("%d IDs of %s recorded under lease %d (worker %d), which its history does not show",
			len(ids), proc, h.Lease, h.Worker), nil)
		return
	}
	l.Blocks++
	l.IDs += int64(len(ids))
	l.LastStart = max(l.LastStart, h.Start)
	for _, id := range ids {
		if w := idLayout.Decompose(id).Worker; w != l.Worker {
			r.violateIDs(aWrongWorker, part, fmt.Sprintf("%s issued %d with worker bits %d on its lease of worker %d", proc, id, w, l.Worker), l)
			break
		}
	}
	if end := l.over(); end != 0 && h.Start > end {
		r.violateIDs(aAfterLoss, part, fmt.Sprintf("%s began a call %.3f ms after its lease %d of worker %d was reported lost (or released) and got %d IDs, first %d",
			proc, float64(h.Start-end)/1e6, l.N, l.Worker, len(ids), ids[0]), l)
	}
}

// over is when the generator of the lease must have stopped: Lost closed
// (a loss), or Release returned (Release stops it first, so a call may
// still begin while Release runs, and fail); 0 if neither (a process
// killed holding it).
func (l *idLease) over() int64 {
	switch {
	case l.Lost != 0 && l.Released != 0:
		return min(l.Lost, l.Released)
	case l.Lost != 0:
		return l.Lost
	}
	return l.Released
}

// dataLoss returns a Redis restart without data or from an older snapshot
// that ended after a's lease was taken and began before b's was.
func dataLoss(faults []Fault, a, b *idLease) *Fault {
	for i, f := range faults {
		if f.Err == "" && (f.Kind == fRestartNoData || f.Kind == fRestartSnapshot) &&
			f.End > a.Acquired && f.Start < b.Acquired {
			return &faults[i]
		}
	}
	return nil
}

// checkHandovers: the leasers' docs promise that a holder learns of a loss
// before the worker ID can be leased again, and its generator stops then;
// so no call on a worker ID may begin after another process leased it
// (unless Redis lost the key), not even by a holder that was stopped across
// its deadline (the generator checks the deadline itself).
func (r *Result) checkHandovers(in IDInput, leases map[string]*idLease) {
	byWorker := map[string][]*idLease{}
	for _, l := range leases {
		if l.Acquired != 0 {
			k := fmt.Sprintf("%s/%d", l.Part, l.Worker)
			byWorker[k] = append(byWorker[k], l)
		}
	}
	for _, k := range sortedKeys(byWorker) {
		ls := byWorker[k]
		sort.Slice(ls, func(i, j int) bool { return ls[i].Acquired < ls[j].Acquired })
		for j, b := range ls {
			for _, a := range ls[:j] {
				if a.Blocks == 0 || a.LastStart <= b.Acquired {
					continue
				}
				switch {
				case a.Part == "redis" && dataLoss(in.Faults, a, b) != nil:
					r.Documented[dHandDataLoss]++
				default:
					r.violateIDs(aAfterHandover, a.Part, fmt.Sprintf("%s began a call on worker %d %.3f ms after %s leased it",
						a.Proc, a.Worker, float64(a.LastStart-b.Acquired)/1e6, b.Proc), a, b)
				}
			}
		}
	}
}

// classifyDups reads the ID files again to find the blocks that hold each
// duplicated value, and classifies every value.
func (r *Result) classifyDups(in IDInput, leases map[string]*idLease, files []string, dups map[int64]int) error {
	issuers := map[int64][]issuer{}
	for _, name := range files {
		proc := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(name), "ids-"), ".bin")
		err := ReadIDFile(name, func(h BlockHeader, ids []int64) error {
			for _, id := range ids {
				if dups[id]&(1<<h.Part) != 0 && len(issuers[id]) < 8 {
					issuers[id] = append(issuers[id], issuer{proc: proc, h: h, start: h.Start, end: h.End})
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	ids := sortedKV(issuers)
	for _, id := range ids {
		is := issuers[id]
		byPart := map[uint8][]issuer{}
		for _, x := range is {
			byPart[x.h.Part] = append(byPart[x.h.Part], x)
		}
		for _, p := range idParts() {
			xs := byPart[p]
			if len(xs) < 2 {
				continue
			}
			sort.Slice(xs, func(i, j int) bool { return xs[i].start < xs[j].start })
			r.classifyDup(in, leases, id, xs[0], xs[1])
		}
	}
	return nil
}

// classifyDup classifies one value issued twice, by blocks x (earlier) and y.
func (r *Result) classifyDup(in IDInput, leases map[string]*idLease, id int64, x, y issuer) {
	part := partNames[x.h.Part]
	what := fmt.Sprintf("%d issued by %s (g%d, lease %d, worker %d) and by %s (g%d, lease %d, worker %d), %.3f ms apart",
		id, x.proc, x.h.G, x.h.Lease, x.h.Worker, y.proc, y.h.G, y.h.Lease, y.h.Worker, float64(y.start-x.start)/1e6)
	if segmentPart(x.h.Part) {
		// redisid: duplicates across processes after a Redis data loss;
		// sqlid: after the row was set back (dupDocumented).
		if kind, ok := dupDocumented(in.Faults, x, y); ok {
			r.Documented[kind]++
			return
		}
		r.violateIDs(aDuplicate, part, what, nil)
		return
	}
	a := leases[leaseKey(x.proc, part, int(x.h.Lease))]
	b := leases[leaseKey(y.proc, part, int(y.h.Lease))]
	if a == nil || b == nil || a == b {
		r.violateIDs(aDuplicate, part, what, a, b)
		return
	}
	if a.Acquired > b.Acquired {
		a, b = b, a
	}
	switch {
	case part == "redis" && dataLoss(in.Faults, a, b) != nil:
		r.Documented[dDupDataLoss]++
	default:
		r.violateIDs(aDuplicate, part, what, a, b)
	}
}

// idParts lists the parts, in order.
func idParts() []uint8 {
	ps := make([]uint8, 0, len(partNames))
	for p := range partNames {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// violateIDs counts an anomaly and keeps (up to 3 per kind) its excerpt:
// the events of the leases involved.
func (r *Result) violateIDs(kind, part, what string, ls ...*idLease) {
	r.add(kind, 1)
	if r.countViolations(kind) >= 3 {
		return
	}
	var evs []Event
	for i, l := range ls {
		if l != nil && !slices.Contains(ls[:i], l) {
			evs = append(evs, l.events...)
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Mono < evs[j].Mono })
	var out []string
	for _, e := range evs {
		line := fmt.Sprintf("%+9.3fms %-6s %-13s %s lease %d worker %d", float64(e.Mono-evs[0].Mono)/1e6, e.Proc, e.Op, e.Part, e.Lease, e.Worker)
		if e.Res != "" {
			line += " " + e.Res
		}
		out = append(out, line)
	}
	r.Violations = append(r.Violations, Violation{Kind: kind, Key: part, What: what, Excerpt: out})
}
