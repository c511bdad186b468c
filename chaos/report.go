package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Report is one run's outcome, as report.json stores it.
type Report struct {
	Backend    string           `json:"backend"`
	Seed       uint64           `json:"seed"`
	Duration   string           `json:"duration"`
	CheckTime  string           `json:"check_time"`
	Sections   int              `json:"critical_sections"`
	IDs        int64            `json:"ids"`
	Procs      int              `json:"processes"`
	Faults     map[string]int   `json:"faults"`
	FaultTotal int              `json:"faults_total"`
	Missing    []string         `json:"missing_faults,omitempty"`
	Anomalies  map[string]int   `json:"anomalies"`
	Documented map[string]int   `json:"documented"`
	Info       map[string]int64 `json:"info"`
	Linear     string           `json:"porcupine"`
	Violations []Violation      `json:"violations,omitempty"`
	Pass       bool             `json:"pass"`
}

func newReport(meta runMeta, r *Result, check time.Duration) *Report {
	rep := &Report{Backend: meta.Backend, Seed: meta.Seed, Duration: meta.Duration.String(),
		CheckTime: check.Round(time.Millisecond).String(), Sections: r.Sections, Procs: r.Procs,
		Faults: meta.Faults, Missing: meta.Missing, Anomalies: r.Anomalies, Documented: r.Documented, Info: r.Info,
		Linear: linearSummary(r.Linear), Violations: r.Violations, IDs: r.Info[iIDs]}
	if isIDBackend(meta.Backend) || meta.Backend == "sem" || meta.Backend == "bank" {
		rep.Linear = "n/a"
	}
	for _, n := range meta.Faults {
		rep.FaultTotal += n
	}
	rep.Pass = true
	for _, n := range r.Anomalies {
		if n > 0 {
			rep.Pass = false
		}
	}
	return rep
}

func countList[V int | int64](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// Markdown is the run's table, then the excerpts of its violations.
func (r *Report) Markdown() string {
	var b strings.Builder
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "### %s, seed %d: %s\n\n", r.Backend, r.Seed, verdict)
	fmt.Fprintf(&b, "| backend | seed | duration | processes | critical sections | IDs | faults | anomalies | documented (reported) | porcupine |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %d | %d: %s | %s | %s | %s |\n\n", r.Backend, r.Seed, r.Duration,
		r.Procs, r.Sections, r.IDs, r.FaultTotal, countList(r.Faults), countList(r.Anomalies), countList(r.Documented), r.Linear)
	fmt.Fprintf(&b, "Other counts: %s; check took %s.\n", countList(r.Info), r.CheckTime)
	if notes := r.infoNotes(); len(notes) > 0 {
		fmt.Fprintf(&b, "\nOther counts are information; only anomalies fail a run:\n\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, "\nFault kinds not injected before the load phase ended: %s.\n", strings.Join(r.Missing, ", "))
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n**%s** on %s: %s\n", v.Kind, v.Key, v.What)
		if len(v.Excerpt) > 0 {
			fmt.Fprintf(&b, "\n```\n%s\n```\n", strings.Join(v.Excerpt, "\n"))
		}
	}
	return b.String()
}

// writeReports writes every run's table into dir/report.md and report.json.
func writeReports(dir string, reps []*Report) error {
	var b strings.Builder
	for _, r := range reps {
		b.WriteString(r.Markdown())
		b.WriteString("\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, "report.json"), reps)
}

// infoNotes says, for each count among the other counts that reads like a
// failure, what it counts and why a passing run may show it.
func (r *Report) infoNotes() []string {
	var notes []string
	if n := r.Info[iDupValues]; n > 0 {
		var doc int
		for _, k := range []string{dDupDataLoss, dSegDataLoss} {
			doc += r.Documented[k]
		}
		notes = append(notes, fmt.Sprintf("%s %d: every repeat of a value within one part (zk, redis, segment), "+
			"counted before the checker classifies the values. A value issued again across processes after a Redis "+
			"restart that lost data (%s, %s) is what the redisid and worker-ID docs allow: %d such values here, counted "+
			"under documented (%s, %s). Any other duplicated value is a %s anomaly: %d here.",
			iDupValues, n, fRestartNoData, fRestartSnapshot, doc, dDupDataLoss, dSegDataLoss, aDuplicate, r.Anomalies[aDuplicate]))
	}
	if n := r.Info[iStalls]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d (the longest %d ms): times a client process ran nothing for %v or more "+
			"(a 10 ms ticker that late: the host's load, or the nemesis's SIGSTOP). Its leases could not be renewed "+
			"meanwhile, so the checker counts each as a pause of that process; %s %d: overlaps whose only explanation "+
			"is such a stall, documented as a client pause is (the holder told in time, as for any overlap).",
			iStalls, n, r.Info[iStallMaxMS], stallMin, iStallExcused, r.Info[iStallExcused]))
	}
	if n := r.Info[iHostStalls]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d (the longest %d ms): times the orchestrator, whose proxies carry every "+
			"client's connections, ran nothing for %v or more (the host's load). Every connection stood still meanwhile, "+
			"as under a %s of every client: the checks that look for a fault explaining a lost or thin hold count it; "+
			"none counts it as freeing a key for another holder.",
			iHostStalls, n, r.Info[iHostStallMaxMS], stallMin, fProxyBlackhole))
	}
	if n := r.Info[iLostHolds]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d: holds whose Lost channel closed. The nemesis kills, pauses and cuts off "+
			"servers and clients, and a hold that can no longer be renewed must be reported lost; a run fails only on an "+
			"overlap nobody was told of in time (%s).", iLostHolds, n, aOverlapUnrep))
	}
	for _, k := range []string{iTimeouts, iAmbiguousAcq} {
		if n := r.Info[k]; n > 0 {
			what := "acquisitions that gave up (their deadline, or not obtained)"
			if k == iAmbiguousAcq {
				what = "acquisitions that ended in another error (a server down or cut off)"
			}
			notes = append(notes, fmt.Sprintf("%s %d: %s under the faults. A failed acquisition never gave its "+
				"caller a critical section; what its request left on a server can only delay others, which the "+
				"liveness checks bound (%s, %s).", k, n, what, aStuck, aLiveness))
		}
	}
	if n := r.Info[iTryRefused]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d: the twins' TryObtain calls (redlock, key %s) that found the key "+
			"held by another owner and returned lock.ErrNotObtained at once, as TryObtain does; the twins try again "+
			"every few milliseconds.", iTryRefused, n, twinKey))
	}
	if n := r.Info[iThinExcused]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d: readings of a raised hold's deadline less than half its raised TTL "+
			"ahead, each with a fault on its process or a server, or a stall of it, shortly before (its renewals could "+
			"not get through); one with neither is a %s anomaly.", iThinExcused, n, aRaisedThin))
	}
	if n := r.Info[iReentryFail]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d: nested lock.Do calls that ended in an error (their hold lost or a "+
			"server unreachable); a nested level that got another token than its hold's is a %s anomaly.",
			iReentryFail, n, aReentryToken))
	}
	if n := r.Info[iGrantLost]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d: acquisitions that returned a lease already reported lost: the lock "+
			"learned from the answer that a newer hold had replaced the one it answered about (a Redis restarted from an "+
			"older snapshot, a deleted hold), and its section starts on a closed Lost; one returned whose own deadline "+
			"had passed with its loss not reported is a %s anomaly.", iGrantLost, n, aGrantLate))
	}
	if n := r.Info[iLeasesLost]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d: worker-ID leases reported lost under the faults; their generators must "+
			"stop, and a call begun after the loss is an %s anomaly.", iLeasesLost, n, aAfterLoss))
	}
	if n := r.Info[iClockBack]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d: generator calls refused because the nemesis stepped the process's "+
			"clock back beyond the tolerance (%s %d): the error the idgen doc promises instead of a duplicate.",
			iClockBack, n, iClockSteps, r.Info[iClockSteps]))
	}
	if n := r.Info[iRefusedFresh]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d: writes the resource refused because a newer fencing token had "+
			"written: fencing doing its job.", iRefusedFresh, n))
	}
	if n := r.Info[iDeficit]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d: increments overwritten by a stale write, on keys with a documented "+
			"overlap (%s); without one it is a %s anomaly.", iDeficit, n, dOverlap, aLostUpdate))
	}
	return notes
}
