// Command bench runs coordkit and its peer libraries side by side on the same
// servers in one run and prints ratio tables (markdown) of the medians of
// several rounds.
//
// Usage:
//
//	go run . [-suite idgen,lock] [-rounds 5] [-dur 2s] [-cpuprofile f]
//
// The lockproc suite runs each library in a process of its own: this
// binary, started again as "bench lockworker ..."; the txn suite runs each
// mode so, as "bench txnworker ...".
//
// Each suite lives in a file of its own and registers itself from init.
// Servers (redis-server, ZooKeeper) are started on loopback by
// internal/testserver and stopped when the run ends.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// Suite is one comparison: it measures coordkit and its peers and prints
// its tables to env.Out.
type Suite struct {
	Name string
	Run  func(env *Env) error
}

var suites []Suite

func register(s Suite) { suites = append(suites, s) }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "lockworker" { // a process of the lockproc suite
		if err := lockWorker(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "lockworker:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "etcdworker" { // a process of the etcd suite
		if err := etcdWorker(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "etcdworker:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "txnworker" { // a process of the txn suite
		if err := txnWorker(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "txnworker:", err)
			os.Exit(1)
		}
		return
	}
	var (
		only   = flag.String("suite", "", "comma-separated suites to run (default: all)")
		rounds = flag.Int("rounds", 5, "rounds per measurement; tables report the median")
		dur    = flag.Duration("dur", 2*time.Second, "duration of one timed round")
		prof   = flag.String("cpuprofile", "", "write a CPU profile of the run (this process only, not the servers) to this file")
	)
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	env := newEnv(*rounds, *dur)
	defer env.Close()

	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	slices.SortFunc(suites, func(a, b Suite) int { return strings.Compare(a.Name, b.Name) })
	failed := false
	for _, s := range suites {
		if len(want) > 0 && !want[s.Name] {
			continue
		}
		fmt.Fprintf(env.Out, "\n## %s\n\n", s.Name)
		if err := s.Run(env); err != nil {
			fmt.Fprintf(os.Stderr, "suite %s: %v\n", s.Name, err)
			failed = true
		}
	}
	env.Close()
	if failed {
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
