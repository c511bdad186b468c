package coordprom_test

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

// readmePrelude is what the README's coordprom snippets may use without
// declaring it.
const readmePrelude = `package main

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/contrib/coordprom"
	"github.com/coordkit/coordkit/lock"
)

var (
	_ = http.Handle
	_ = strings.Cut
	_ = prometheus.NewRegistry
	_ = promhttp.HandlerFor
	_ = coordprom.NewLockMetrics
	_ = lock.New
)

func main() {}
`

// readmeSnippetRE finds the README's Go blocks that need this module: they
// are fenced "```go coordprom", which the root module's README test (it
// compiles the blocks fenced "```go") leaves alone.
var readmeSnippetRE = regexp.MustCompile("(?s)```go coordprom\n(.*?)```")

// TestReadmeSnippets builds the README's coordprom snippets as the bodies of
// functions that have rdb in scope, in this module.
func TestReadmeSnippets(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeSnippetRE.FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no ```go coordprom snippet in README.md")
	}
	var src strings.Builder
	src.WriteString(readmePrelude)
	for i, b := range blocks {
		fmt.Fprintf(&src, "\nfunc snippet%d(rdb redis.UniversalClient) {\n%s\n", i, b[1])
		for _, name := range topLevelDefines(t, b[1]) {
			fmt.Fprintf(&src, "\t_ = %s\n", name)
		}
		src.WriteString("}\n")
	}
	dir, err := os.MkdirTemp(".", "snippets-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput(); err != nil {
		t.Fatalf("README's coordprom snippets do not compile:\n%s\n%s", out, src.String())
	}
}

// topLevelDefines returns the names a snippet declares with := at its top
// level.
func topLevelDefines(t *testing.T, body string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc f() {\n"+body+"\n}", 0)
	if err != nil {
		t.Fatalf("snippet does not parse: %v\n%s", err, body)
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
	return names
}
