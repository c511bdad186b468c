package readme_test

import (
	"fmt"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// firstScreen is how many lines of `go doc pkg` a user sees first: the
// package's usage block must begin within them.
const firstScreen = 40

// designRE matches what belongs below the usage block: a storage schema
// (Redis keys, znodes, tables) or an encoded field name.
var designRE = regexp.MustCompile(`(?i)schema|\{key\}|\\x00|KEYS\[|znode path`)

// libraryPackages returns the import path and directory of every package of
// the root module that users import: all but internal/, cmd/ and examples/.
func libraryPackages(t *testing.T) [][2]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}}", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs [][2]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, _ := strings.Cut(line, " ")
		if strings.Contains(path, "/internal/") || strings.Contains(path, "/cmd/") || strings.Contains(path, "/examples/") {
			continue
		}
		pkgs = append(pkgs, [2]string{path, dir})
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d library packages, want at least 10:\n%s", len(pkgs), out)
	}
	return pkgs
}

// packageDoc returns the parsed package comment of the package in dir.
func packageDoc(t *testing.T, dir string) *comment.Doc {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			text += f.Doc.Text()
		}
	}
	if text == "" {
		t.Fatalf("%s has no package comment", dir)
	}
	return new(comment.Parser).Parse(text)
}

// usage returns the code blocks before the doc's first heading, and the
// line of `go doc`'s output on which the first of them begins (`go doc`
// prints the package clause and a blank line first).
func usage(d *comment.Doc) (blocks []*comment.Code, firstLine int, before string) {
	var head comment.Doc
	for _, b := range d.Content {
		switch b := b.(type) {
		case *comment.Heading:
			return blocks, firstLine, before
		case *comment.Code:
			if blocks == nil {
				text := string(new(comment.Printer).Text(&head))
				before = text
				firstLine = 2 + strings.Count(text, "\n") + 1
			}
			blocks = append(blocks, b)
			continue
		}
		if blocks == nil {
			head.Content = append(head.Content, b)
		}
	}
	return blocks, firstLine, before
}

// TestDocsUsageFirst holds every library package's doc to the house style:
// `go doc pkg` shows a usage block on its first screen, before any heading
// and before any storage schema.
func TestDocsUsageFirst(t *testing.T) {
	for _, p := range libraryPackages(t) {
		t.Run(strings.TrimPrefix(p[0], "github.com/coordkit/coordkit/"), func(t *testing.T) {
			blocks, line, before := usage(packageDoc(t, p[1]))
			if len(blocks) == 0 {
				t.Fatalf("the package doc has no code block before its first heading")
			}
			if line > firstScreen {
				t.Errorf("the usage block begins on line %d of go doc's output, after the first %d", line, firstScreen)
			}
			if m := designRE.FindString(before); m != "" {
				t.Errorf("the package doc names a schema (%q) before its usage block", m)
			}
			// The same, as go doc prints it.
			out, err := exec.Command("go", "doc", p[0]).Output()
			if err != nil {
				t.Fatalf("go doc %s: %v", p[0], err)
			}
			lines := strings.Split(string(out), "\n")
			first := strings.SplitN(blocks[0].Text, "\n", 2)[0]
			found := false
			for _, l := range lines[:min(firstScreen, len(lines))] {
				if strings.TrimSpace(l) == strings.TrimSpace(first) && strings.HasPrefix(l, "    ") {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("go doc's first %d lines do not show the usage block (%q):\n%s", firstScreen, first, strings.Join(lines[:min(firstScreen, len(lines))], "\n"))
			}
			if i := strings.Index(string(out), "\n# "); i >= 0 && !strings.HasPrefix(string(out)[i+1:], "# Guarantees\n") {
				t.Errorf("the first heading of go doc's output is %q, want # Guarantees", strings.SplitN(string(out)[i+1:], "\n", 2)[0])
			}
		})
	}
}

// docPrelude is what a package doc's usage block may use without declaring
// it: the imports, the clients a program has made, and the user's functions
// the blocks call.
const docPrelude = `package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/election"
	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/redisid"
	"github.com/coordkit/coordkit/idgen/sqlid"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/redlock"
	"github.com/coordkit/coordkit/semaphore"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
	"github.com/coordkit/coordkit/watchdog"
	"github.com/coordkit/coordkit/zklock"
)

var (
	_ = fmt.Sprint
	_ = time.Second
	_ = zk.Connect
	_ = sql.Open
	_ = election.New
	_ = idgen.LayoutTwitter
	_ = redisid.NewSegments
	_ = sqlid.NewLeaf
	_ = workerid.NewZK
	_ = lock.Do
	_ = redlock.New
	_ = semaphore.New
	_ = sqllock.NewPostgres
	_ = txn.New
	_ = watchdog.Start
	_ = zklock.New
)

var (
	rdb     redis.UniversalClient
	masters []redis.UniversalClient
	conn    *zk.Conn
	db      *sql.DB
	locker  lock.Locker

	// package txn's usage block
	accounts   *sql.DB
	snowflake  *idgen.Snowflake
	creditStep txn.SagaStep
	payload    []byte
)

func withdraw(ctx context.Context, user string, amount int) error { return nil }
func drainOutbox(ctx context.Context, token int64) error         { <-ctx.Done(); return nil }
func sendReport(ctx context.Context) error                       { return nil }
func renew(ctx context.Context) error                            { return nil }
func debit(ctx context.Context, tx *sql.Tx, payload []byte) error  { return nil }
func credit(ctx context.Context, tx *sql.Tx, payload []byte) error { return nil }

func main() {}
`

// TestDocsUsageCompiles builds the usage blocks of every library package's
// doc, each package's blocks in order as the body of one function, so that
// what go doc shows first is code that compiles.
func TestDocsUsageCompiles(t *testing.T) {
	var src strings.Builder
	src.WriteString(docPrelude)
	for i, p := range libraryPackages(t) {
		blocks, _, _ := usage(packageDoc(t, p[1]))
		var body strings.Builder
		for _, b := range blocks {
			body.WriteString(b.Text)
		}
		fmt.Fprintf(&src, "\n// %s\nfunc doc%d(ctx context.Context) error {\n%s\n", p[0], i, body.String())
		for _, name := range declaredIn(t, body.String()) {
			fmt.Fprintf(&src, "\t_ = %s\n", name)
		}
		src.WriteString("\treturn nil\n}\n")
	}
	dir, err := os.MkdirTemp(".", "docs-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("the package docs' usage blocks do not compile:\n%s\n%s", out, numbered(src.String()))
	}
}

// declaredIn returns the names a block declares with := at its top level,
// or nil when the block does not parse as a function body (the build then
// reports it).
func declaredIn(t *testing.T, body string) []string {
	t.Helper()
	names, err := topLevelDefs(body)
	if err != nil {
		return nil
	}
	return names
}
