// Command mutants runs the mutant catalog (chaos/mutants/NN-name.patch)
// against the chaos checker: for each mutant it copies the repository's
// HEAD into a scratch directory (git archive), applies the patch, builds the
// library and the checker, runs the checker on the backends the patch's
// header names, and prints a table: killed (by which checkers), survived,
// build-failed, timed out or error, and after how long; then the kill rate
// (killed / non-equivalent mutants). The scratch copies are removed; the
// checker's output of every run is kept under the results directory.
//
//	cd chaos && go run ./mutants          (make chaos-mutants)
//
// Settings come from the environment, so that make passes them through:
//
//	MUTANTS=01,02         run only these (by number or full name); default every one
//	MUTANT_PROFILE=short  the checker's profile
//	MUTANT_SEEDS="1 2"    seeds (space- or comma-separated); a mutant is killed by the first failing run
//	MUTANT_TIMEOUT=4m     bound on one checker run (one backend, one seed)
//	MUTANT_OUT=dir        results directory (default: a new temp dir, printed)
//	MUTANT_KEEP=1         keep the scratch copies
//
// A patch's header is its lines before the diff that start with "#" (git
// apply and patch -p1 skip them): "# Backends: lock fair" names the chaos
// backends that should expose the mutant ("none": the checker has no
// workload for it; it counts as survived without a run), "# Flags:" extra
// checker flags, "# Tests: ./pkg TestA|TestB" (repeatable) Go tests of the
// project that must fail on the mutant (run on the patched copy when the
// checker's runs did not kill it: a failing test kills it too, and the
// table names the test), and "# Equivalent: why" marks a mutant that cannot break
// a promise: it is listed, not run, not counted. README.md describes the
// other fields.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// mutant is one patch of the catalog and its header.
type mutant struct {
	Name     string // file name without .patch
	Path     string
	Breaks   string
	Backends []string
	Flags    []string
	Tests    [][2]string // package and -run pattern of Go tests that must fail
	Equiv    string      // reason, if equivalent
}

// outcome is one mutant's row of the table.
type outcome struct {
	m      *mutant
	result string // killed, survived, build-failed, timeout, error, equivalent, no-workload
	by     string // the checkers that flagged it, or the error
	run    string // backend and seed of the killing run
	took   time.Duration
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(2)
	}
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run() error {
	root, err := gitOut("", "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("not in a git checkout: %w", err)
	}
	catalog := filepath.Join(root, "chaos", "mutants")
	profile := env("MUTANT_PROFILE", "short")
	seeds := strings.FieldsFunc(env("MUTANT_SEEDS", "1"), func(r rune) bool { return r == ',' || r == ' ' })
	timeout, err := time.ParseDuration(env("MUTANT_TIMEOUT", "4m"))
	if err != nil {
		return fmt.Errorf("MUTANT_TIMEOUT: %w", err)
	}
	all, err := loadCatalog(catalog)
	if err != nil {
		return err
	}
	selected := all
	if sel := os.Getenv("MUTANTS"); sel != "" {
		selected = nil
		for _, want := range strings.Split(sel, ",") {
			want = strings.TrimSpace(want)
			found := false
			for _, m := range all {
				if m.Name == want || strings.HasPrefix(m.Name, want+"-") {
					selected, found = append(selected, m), true
				}
			}
			if !found {
				return fmt.Errorf("MUTANTS: no mutant %q in %s", want, catalog)
			}
		}
	}
	out := os.Getenv("MUTANT_OUT")
	if out == "" {
		if out, err = os.MkdirTemp("", "coordkit-mutants-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	head, _ := gitOut(root, "rev-parse", "--short", "HEAD")
	if dirty, _ := gitOut(root, "status", "--porcelain", "--untracked-files=no"); dirty != "" {
		fmt.Println("mutants: warning: uncommitted changes are not in the copies (they are made from HEAD)")
	}
	fmt.Printf("mutants: %d of %d, profile %s, seeds %s, timeout %v per run, HEAD %s, output %s\n",
		len(selected), len(all), profile, strings.Join(seeds, ","), timeout, head, out)

	var rows []outcome
	for _, m := range selected {
		o := runMutant(root, out, m, profile, seeds, timeout)
		fmt.Printf("mutants: %s: %s %s (%v)\n", m.Name, o.result, o.by, o.took.Round(time.Second))
		rows = append(rows, o)
	}
	table := render(rows, profile, seeds, head)
	fmt.Println()
	fmt.Print(table)
	return os.WriteFile(filepath.Join(out, "mutants.md"), []byte(table), 0o644)
}

// loadCatalog reads every *.patch in dir, sorted by name.
func loadCatalog(dir string) ([]*mutant, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.patch"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var ms []*mutant
	for _, p := range paths {
		m := &mutant{Name: strings.TrimSuffix(filepath.Base(p), ".patch"), Path: p}
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "#") {
				break
			}
			k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "breaks":
				m.Breaks = v
			case "backends":
				m.Backends = strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
			case "flags":
				m.Flags = strings.Fields(v)
			case "tests":
				if pkg, run, ok := strings.Cut(v, " "); ok {
					m.Tests = append(m.Tests, [2]string{pkg, strings.TrimSpace(run)})
				}
			case "equivalent":
				m.Equiv = v
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
		if m.Equiv == "" && len(m.Backends) == 0 {
			return nil, fmt.Errorf("%s: no \"# Backends:\" line in its header", p)
		}
		ms = append(ms, m)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no *.patch in %s", dir)
	}
	return ms, nil
}

// runMutant copies HEAD, applies m, builds, and runs the checker until a
// run fails.
func runMutant(root, out string, m *mutant, profile string, seeds []string, timeout time.Duration) (o outcome) {
	o.m = m
	start := time.Now()
	defer func() { o.took = time.Since(start) }()
	if m.Equiv != "" {
		o.result, o.by = "equivalent", m.Equiv
		return o
	}
	scratch, err := os.MkdirTemp("", "coordkit-mutant-"+m.Name+"-")
	if err != nil {
		o.result, o.by = "error", err.Error()
		return o
	}
	if os.Getenv("MUTANT_KEEP") == "" {
		defer os.RemoveAll(scratch)
	} else {
		fmt.Printf("mutants: %s: scratch copy kept in %s\n", m.Name, scratch)
	}
	logDir := filepath.Join(out, m.Name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		o.result, o.by = "error", err.Error()
		return o
	}
	src := filepath.Join(scratch, "src")
	steps := [][]string{
		{"sh", "-c", fmt.Sprintf("mkdir -p %q && git -C %q archive HEAD | tar -x -C %q", src, root, src)},
		// An empty repository, so that git apply patches these files even
		// when the temp dir lies inside another checkout.
		{"git", "-C", src, "init", "-q"},
		{"git", "-C", src, "apply", "--whitespace=nowarn", m.Path},
	}
	for _, s := range steps {
		if b, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			o.result, o.by = "error", fmt.Sprintf("%s: %v: %s", strings.Join(s[:2], " "), err, firstLine(b))
			return o
		}
	}
	bin := filepath.Join(scratch, "chaos.bin")
	for _, b := range []struct{ dir, what string }{{src, "./..."}, {filepath.Join(src, "chaos"), "-o " + bin + " ."}} {
		// -trimpath: the copies differ only in their directory, which the
		// build cache then ignores, so only the patched packages compile.
		cmd := exec.Command("go", append([]string{"build", "-trimpath"}, strings.Fields(b.what)...)...)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			os.WriteFile(filepath.Join(logDir, "build.log"), out, 0o644)
			o.result, o.by = "build-failed", firstLine(out)
			return o
		}
	}
	if len(m.Backends) == 1 && m.Backends[0] == "none" {
		o.result, o.by = "no-workload", "the checker runs no workload of this package"
		return testsKill(o, src, logDir, timeout)
	}
	o.result = "survived"
	defer func() {
		if o.result != "killed" {
			o = testsKill(o, src, logDir, timeout)
		}
	}()
	for _, b := range m.Backends {
		for _, seed := range seeds {
			res, by := checkerRun(filepath.Join(src, "chaos"), bin, filepath.Join(logDir, b+"-"+seed), b, seed, profile, m.Flags, timeout)
			switch res {
			case "killed":
				o.result, o.by, o.run = res, by, b+" seed "+seed
				return o
			case "pass":
			default: // timeout or error: recorded, the other runs go on
				o.result, o.by, o.run = res, by, b+" seed "+seed
			}
		}
	}
	return o
}

// testsKill runs the mutant's Go tests ("# Tests:") on its patched copy src:
// the first that fails kills it.
func testsKill(o outcome, src, logDir string, timeout time.Duration) outcome {
	for i, t := range o.m.Tests {
		dir, pkg := moduleOf(src, t[0])
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		cmd := exec.CommandContext(ctx, "go", "test", "-trimpath", "-count=1", "-run", t[1], pkg)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil // read before cancel, which sets it
		cancel()
		os.WriteFile(filepath.Join(logDir, fmt.Sprintf("test-%d.log", i)), out, 0o644)
		if err != nil && !timedOut {
			o.result, o.by, o.run = "killed", "go test "+t[0]+" -run '"+t[1]+"'", "tests"
			return o
		}
	}
	return o
}

// moduleOf returns the directory of the Go module that holds package pkg
// (a path relative to src, the repository's root, such as
// ./etcd/etcdlock), the nearest one with a go.mod, and pkg relative to it
// (./etcdlock): a package of a module of its own (etcd/, contrib/*) is
// tested from that module, as go test requires.
func moduleOf(src, pkg string) (string, string) {
	rel := filepath.Clean(strings.TrimPrefix(pkg, "./"))
	for d := rel; d != "." && d != string(filepath.Separator); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(src, d, "go.mod")); err == nil {
			sub, err := filepath.Rel(d, rel)
			if err != nil {
				break
			}
			return filepath.Join(src, d), "./" + filepath.ToSlash(sub)
		}
	}
	return src, pkg
}

// checkerRun runs the checker once: "killed" with the anomaly kinds of its
// failing reports, "pass", "timeout" or "error" with the error.
func checkerRun(dir, bin, out, backend, seed, profile string, flags []string, timeout time.Duration) (string, string) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "error", err.Error()
	}
	args := append([]string{"-profile", profile, "-backend", backend, "-seed", seed, "-out", out}, flags...)
	logf, err := os.Create(out + ".log")
	if err != nil {
		return "error", err.Error()
	}
	defer logf.Close()
	fmt.Fprintf(logf, "$ chaos %s\n", strings.Join(args, " "))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = logf, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "error", err.Error()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-ctx.Done():
		killTree(cmd.Process.Pid)
		<-done
		logf.Write(stderr.Bytes())
		return "timeout", fmt.Sprintf("no verdict in %v", timeout)
	}
	logf.Write(stderr.Bytes())
	code := 0
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		code = ee.ExitCode()
	} else if werr != nil {
		return "error", werr.Error()
	}
	switch code {
	case 0:
		return "pass", ""
	case 1:
		kinds, err := anomalies(filepath.Join(out, "report.json"))
		if err != nil {
			return "error", err.Error()
		}
		return "killed", strings.Join(kinds, ", ")
	}
	return "error", fmt.Sprintf("exit %d: %s", code, lastLine(stderr.Bytes()))
}

// anomalies lists the anomaly kinds (with counts) of a report.json.
func anomalies(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reps []struct {
		Anomalies map[string]int `json:"anomalies"`
	}
	if err := json.Unmarshal(b, &reps); err != nil {
		return nil, err
	}
	sum := map[string]int{}
	for _, r := range reps {
		for k, n := range r.Anomalies {
			sum[k] += n
		}
	}
	var kinds []string
	for k, n := range sum {
		if n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	sort.Strings(kinds)
	return kinds, nil
}

// killTree kills pid's process group and every descendant of pid (a
// client or server process that made a group of its own included).
func killTree(pid int) {
	kids := map[int][]int{}
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...: comm may hold spaces; cut after ')'.
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i >= 0 {
				if f := strings.Fields(s[i+1:]); len(f) > 1 {
					if pp, err := strconv.Atoi(f[1]); err == nil {
						kids[pp] = append(kids[pp], p)
					}
				}
			}
		}
	}
	var all []int
	var walk func(int)
	walk = func(p int) {
		all = append(all, p)
		for _, k := range kids[p] {
			walk(k)
		}
	}
	walk(pid)
	syscall.Kill(-pid, syscall.SIGKILL)
	for _, p := range all {
		syscall.Kill(p, syscall.SIGKILL)
	}
}

// render is the Markdown table and the kill rate.
func render(rows []outcome, profile string, seeds []string, head string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Mutants on HEAD %s, profile %s, seeds %s, %s.\n\n", head, profile, strings.Join(seeds, ","),
		time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "| mutant | backends | result | by (anomalies of the killing run) | time |\n| --- | --- | --- | --- | --- |\n")
	killed, counted := 0, 0
	var total time.Duration
	for _, o := range rows {
		by := o.by
		if o.run != "" {
			by = o.run + ": " + by
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %v |\n", o.m.Name, strings.Join(o.m.Backends, " "), o.result,
			strings.ReplaceAll(by, "|", "/"), o.took.Round(time.Second))
		total += o.took
		if o.result == "equivalent" {
			continue
		}
		counted++
		if o.result == "killed" {
			killed++
		}
	}
	rate := 0.0
	if counted > 0 {
		rate = 100 * float64(killed) / float64(counted)
	}
	fmt.Fprintf(&b, "\nKill rate: %d / %d non-equivalent mutants = %.0f%% (total %v).\n", killed, counted, rate, total.Round(time.Second))
	return b.String()
}

func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	return strings.TrimSpace(string(b)), err
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
