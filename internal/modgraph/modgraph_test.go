// Package modgraph_test holds the root module's dependencies to what
// DESIGN.md promises users who import only the library packages: they
// build with go-redis, go-zookeeper and uuid (and what those require), never
// with a SQL driver or a metrics library; and the root module's whole graph
// (its tests' requirements included) holds no etcd client, gRPC or
// protobuf, which the etcd backend (etcd/, a module of its own) brings. The drivers and goleak that the
// root go.mod also requires are for its tests; coordctl and the examples,
// which need more, are modules of their own (cmd/coordctl, examples).
package modgraph_test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// libraryRequires are the modules the library packages may import directly.
var libraryRequires = []string{"github.com/redis/go-redis/v9", "github.com/go-zookeeper/zk", "github.com/google/uuid"}

// forbidden are module path prefixes no library package may build with.
var forbidden = []string{
	"github.com/jackc/",          // pgx
	"github.com/go-sql-driver/",  // MySQL
	"github.com/lib/pq",          // PostgreSQL
	"github.com/prometheus/",     // client_golang
	"go.opentelemetry.io/",       // OpenTelemetry
	"go.uber.org/goleak",         // a test helper
	"github.com/anishathalye/",   // porcupine (chaos/)
	"go.etcd.io/",                // etcd's client
	"google.golang.org/grpc",     // what etcd's client drags
	"google.golang.org/protobuf", // likewise
}

const root = "../.."

// goCmd runs the go command in the root module and returns its stdout.
func goCmd(t *testing.T, args ...string) string {
	t.Helper()
	// go test puts its own GOROOT/bin first on the test's PATH.
	bin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	cmd.Env = append(cmd.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

// libraryPackages returns the root module's packages that users import:
// every package outside internal/.
func libraryPackages(t *testing.T) []string {
	t.Helper()
	var lib []string
	for _, p := range strings.Fields(goCmd(t, "list", "./...")) {
		for _, own := range []string{"/cmd/", "/examples/", "/bench/", "/chaos/", "/contrib/", "/etcd/"} {
			if strings.Contains(p+"/", own) {
				t.Errorf("%s is a package of the root module: it must be in a module of its own", p)
			}
		}
		if !strings.Contains(p+"/", "/internal/") {
			lib = append(lib, p)
		}
	}
	if len(lib) < 10 {
		t.Fatalf("only %d library packages found: %q", len(lib), lib)
	}
	return lib
}

// TestLibraryDependencies: the library packages (their tests excluded)
// build with no SQL driver, no metrics library and no test helper; every
// module they build with is coordkit, one of libraryRequires, or a module
// those require.
func TestLibraryDependencies(t *testing.T) {
	lib := libraryPackages(t)
	// Each package the library builds with: its module and its imports.
	out := goCmd(t, append([]string{"list", "-deps", "-f",
		"{{if not .Standard}}{{.ImportPath}} {{with .Module}}{{.Path}}{{end}} {{join .Imports \" \"}}{{end}}"}, lib...)...)
	module := map[string]string{}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			t.Fatalf("go list: %q", line)
		}
		module[f[0]], imports[f[0]] = f[1], f[2:]
	}

	// What libraryRequires require, as the module graph says.
	allowed := map[string]bool{"github.com/coordkit/coordkit": true}
	for _, m := range libraryRequires {
		allowed[m] = true
	}
	for _, line := range strings.Split(goCmd(t, "mod", "graph"), "\n") {
		from, to, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		from, _, _ = strings.Cut(from, "@")
		to, _, _ = strings.Cut(to, "@")
		if slices.Contains(libraryRequires, from) {
			allowed[to] = true
		}
	}

	// Walk the imports from the library packages, so that each module is
	// reported once, with the chain of imports that brings it in.
	via := map[string]string{} // package -> the package that imports it first
	queue := slices.Clone(lib)
	for _, p := range lib {
		via[p] = ""
	}
	used := map[string]bool{}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		m, known := module[p]
		if !known {
			continue // a standard library package
		}
		if !used[m] {
			used[m] = true
			bad := !allowed[m]
			for _, f := range forbidden {
				bad = bad || strings.HasPrefix(m, f)
			}
			if bad {
				chain := []string{p}
				for q := via[p]; q != ""; q = via[q] {
					chain = append([]string{q}, chain...)
				}
				t.Errorf("library packages build with module %s, neither coordkit's nor required by %v:\n\t%s",
					m, libraryRequires, strings.Join(chain, "\n\t-> "))
			}
		}
		for _, i := range imports[p] {
			if _, seen := via[i]; !seen {
				via[i] = p
				queue = append(queue, i)
			}
		}
	}
	for _, m := range libraryRequires {
		if !used[m] {
			t.Errorf("no library package builds with %s: drop it from DESIGN.md's list, or this test's", m)
		}
	}
}

// TestRootRequiresForTestsOnly: every module the root go.mod requires
// directly, beyond libraryRequires, is imported by tests (or by test
// helpers under internal/) only — TestLibraryDependencies holds the
// library packages to that; here each such requirement must still be
// needed by some test, so that go.mod lists nothing dead.
func TestRootRequiresForTestsOnly(t *testing.T) {
	var mod struct {
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	if err := json.Unmarshal([]byte(goCmd(t, "mod", "edit", "-json")), &mod); err != nil {
		t.Fatal(err)
	}
	testImports := map[string]bool{}
	out := goCmd(t, "list", "-deps", "-test", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", "./...")
	for _, line := range strings.Split(out, "\n") {
		if _, m, ok := strings.Cut(line, " "); ok {
			testImports[m] = true
		}
	}
	var extra []string
	for _, r := range mod.Require {
		if r.Indirect || slices.Contains(libraryRequires, r.Path) {
			continue
		}
		extra = append(extra, r.Path)
		if !testImports[r.Path] {
			t.Errorf("go.mod requires %s, which no package or test of the root module imports", r.Path)
		}
	}
	t.Logf("required for tests only: %v", extra)
}

// graphForbidden are module path prefixes that no module of the root
// module's graph may have, tests' requirements included: etcd's client and
// what it drags, which live in the etcd module (etcd/) only. A user who
// requires github.com/coordkit/coordkit must not download them.
var graphForbidden = []string{"go.etcd.io/", "google.golang.org/grpc", "google.golang.org/protobuf"}

// TestRootGraphFreeOfEtcd: go mod graph of the root module names no module
// of graphForbidden, as a requirement of the root module or of any module
// it requires.
func TestRootGraphFreeOfEtcd(t *testing.T) {
	var mods int
	for _, line := range strings.Split(goCmd(t, "mod", "graph"), "\n") {
		from, to, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		mods++
		for _, f := range graphForbidden {
			if strings.HasPrefix(to, f) {
				t.Errorf("the root module's graph holds %s (required by %s): it belongs in the etcd module", to, from)
			}
		}
	}
	if mods == 0 {
		t.Fatal("go mod graph listed no requirement")
	}
}
