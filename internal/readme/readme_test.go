// Package readme_test holds the README and the package docs to the code:
// it compiles the README's Go snippets and the usage blocks of the package
// docs, and runs each README snippet (snippets_gen_test.go, generated from
// README.md) against real servers, checking what the README says it does.
package readme_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// prelude is what every snippet may use without declaring it: the usual
// imports and the variables a program around it would have.
const prelude = `package main

import (
	"context"
	"database/sql"
	"log/slog"
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
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
	"github.com/coordkit/coordkit/zklock"
)

var (
	_ = slog.Default
	_ = time.Second
	_ = zk.Connect
	_ = redis.NewClient
	_ = idgen.LayoutTwitter
	_ = redisid.NewSegments
	_ = sqlid.NewLeaf
	_ = workerid.NewZK
	_ = election.New
	_ = lock.Do
	_ = redlock.New
	_ = zklock.New
	_ = sql.Open
	_ = sqllock.NewPostgres
	_ = txn.New
)

func withdraw(ctx context.Context, user string, amount int) error { return nil }

func drainOutbox(ctx context.Context, token int64) error { <-ctx.Done(); return nil }

func sendReport(ctx context.Context) error { return nil }

var locker lock.Locker

// The transfer snippet's database, gids, payload and branch funcs.
var (
	db      *sql.DB
	ids     *idgen.Snowflake
	payload []byte

	debit, refund, credit, uncredit txn.Func
)

func main() {}
`

var snippetRE = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestSnippetsCompile builds every ```go block of README.md as the body of
// a function that has ctx, conn (*zk.Conn), rdb and masters in scope.
func TestSnippetsCompile(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := snippetRE.FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no Go snippet in README.md")
	}
	dir, err := os.MkdirTemp(".", "snippets-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var src strings.Builder
	src.WriteString(prelude)
	for i, b := range blocks {
		body := b[1]
		fmt.Fprintf(&src, "\nfunc snippet%d(ctx context.Context, conn *zk.Conn, rdb redis.UniversalClient, masters []redis.UniversalClient) error {\n%s\n", i, body)
		for _, name := range declared(t, body) {
			fmt.Fprintf(&src, "\t_ = %s\n", name)
		}
		src.WriteString("\treturn nil\n}\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("README snippets do not compile:\n%s\n%s", out, numbered(src.String()))
	}
}

// declared returns the names a snippet declares with := at its top level.
func declared(t *testing.T, body string) []string {
	t.Helper()
	names, err := topLevelDefs(body)
	if err != nil {
		t.Fatalf("snippet does not parse: %v\n%s", err, body)
	}
	return names
}

// topLevelDefs returns the names body, parsed as a function body, declares
// with := at its top level (README snippets and package docs' usage blocks).
func topLevelDefs(body string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc f() {\n"+body+"\n}", 0)
	if err != nil {
		return nil, err
	}
	var names []string
	seen := map[string]bool{}
	for _, st := range f.Decls[0].(*ast.FuncDecl).Body.List {
		as, ok := st.(*ast.AssignStmt)
		if !ok || as.Tok != token.DEFINE {
			continue
		}
		for _, e := range as.Lhs {
			if id, ok := e.(*ast.Ident); ok && id.Name != "_" && !seen[id.Name] {
				seen[id.Name] = true
				names = append(names, id.Name)
			}
		}
	}
	return names, nil
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&b, "%4d %s\n", i+1, l)
	}
	return b.String()
}
