package main

import (
	"strings"
	"testing"
)

// TestReportExplainsCounts: a passing ids run whose other counts show
// duplicate values says why they are expected (documented data-loss
// duplicates, no anomaly); a run without such counts adds no notes.
func TestReportExplainsCounts(t *testing.T) {
	r := &Report{Backend: "ids", Seed: 1, Pass: true,
		Info:       map[string]int64{iIDs: 100000, iDupValues: 17088, iClockBack: 3, iClockSteps: 5},
		Documented: map[string]int{dDupDataLoss: 12000, dSegDataLoss: 5000},
		Anomalies:  map[string]int{}}
	md := r.Markdown()
	for _, want := range []string{
		"Other counts are information; only anomalies fail a run:",
		"- duplicate-values 17088: every repeat of a value within one part",
		"17000 such values here",
		"Any other duplicated value is a duplicate-id anomaly: 0 here.",
		"- clock-backwards-errors 3: ",
		"(clock-steps-applied 5)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	lk := &Report{Backend: "lock", Seed: 1, Pass: true,
		Info: map[string]int64{iTimeouts: 7, iAmbiguousAcq: 2, iReentryFail: 1, iLostHolds: 4}}
	md = lk.Markdown()
	for _, want := range []string{
		"- acquire-timeout 7: acquisitions that gave up",
		"- acquire-ambiguous 2: acquisitions that ended in another error",
		"(key-stuck-after-heal, liveness-bound-exceeded)",
		"- reentry-failed 1: ",
		"- holds-lost 4: ",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	quiet := &Report{Backend: "lock", Seed: 1, Pass: true, Info: map[string]int64{iReentries: 4}}
	if md := quiet.Markdown(); strings.Contains(md, "only anomalies fail") {
		t.Errorf("notes without a count that needs one:\n%s", md)
	}
}
