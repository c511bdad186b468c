package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCatalogApplies: every mutant of the catalog still applies to the
// working tree it was checked out with (git apply --check, from the
// repository's root) and names its backends or why it is equivalent. A
// patch whose context a later change moved shows as "error" in make
// chaos-mutants' table, hours later; here it fails make test (05 had
// stopped applying unnoticed).
func TestCatalogApplies(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git not on PATH (apt-get install -y git)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := loadCatalog(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 20 {
		t.Fatalf("%d mutants in the catalog, want at least 20", len(ms))
	}
	for _, m := range ms {
		path, err := filepath.Abs(m.Path)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Backends) == 0 && m.Equiv == "" {
			t.Errorf("%s: no # Backends: and no # Equivalent: line", m.Name)
		}
		out, err := exec.Command("git", "-C", root, "apply", "--check", "--whitespace=nowarn", path).CombinedOutput()
		if err != nil {
			t.Errorf("%s does not apply to this tree: %v\n%s", m.Name, err, out)
		}
	}
}

// TestModuleOf: a "# Tests:" package of a module of its own (etcd/,
// contrib/*) runs from that module's directory; one of the root module's
// from the root; and every package the catalog's headers name exists.
func TestModuleOf(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ pkg, dir, rel string }{
		{"./etcd/etcdlock", "etcd", "./etcdlock"},
		{"./redlock", "", "./redlock"},
		{"./idgen/workerid", "", "./idgen/workerid"},
	} {
		dir, rel := moduleOf(root, c.pkg)
		if want := filepath.Join(root, c.dir); dir != want || rel != c.rel {
			t.Errorf("moduleOf(%s) = %s, %s; want %s, %s", c.pkg, dir, rel, want, c.rel)
		}
	}
	ms, err := loadCatalog(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for _, tc := range m.Tests {
			dir, rel := moduleOf(root, tc[0])
			if _, err := os.Stat(filepath.Join(dir, rel)); err != nil {
				t.Errorf("%s: # Tests: package %s: %v", m.Name, tc[0], err)
			}
		}
	}
}
