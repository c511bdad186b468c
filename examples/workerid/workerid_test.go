package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// build compiles the example once per test.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "workerid")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startFive starts five instances at once and returns the worker IDs they
// leased; each is stopped with SIGTERM and must say it released its ID.
func startFive(t *testing.T, bin string, args ...string) []int {
	t.Helper()
	type proc struct {
		cmd   *exec.Cmd
		lines *bufio.Scanner
	}
	var ps []proc
	for range 5 {
		cmd := exec.Command(bin, append([]string{"-every", "50ms"}, args...)...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		ps = append(ps, proc{cmd, bufio.NewScanner(out)})
	}
	var ids []int
	for _, p := range ps {
		if !p.lines.Scan() {
			t.Fatalf("no output: %v", p.lines.Err())
		}
		var id int
		var svc string
		if _, err := fmt.Sscanf(p.lines.Text(), "leased worker %d of %s", &id, &svc); err != nil {
			t.Fatalf("first line %q: %v", p.lines.Text(), err)
		}
		ids = append(ids, id)
	}
	for _, p := range ps {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, p := range ps {
		var last string
		for p.lines.Scan() {
			last = p.lines.Text()
			if !strings.HasPrefix(last, "id ") && !strings.HasPrefix(last, "released ") {
				t.Errorf("unexpected line %q", last)
			}
		}
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("instance %d: %v", i, err)
		}
		if want := fmt.Sprintf("released worker %d", ids[i]); last != want {
			t.Errorf("instance %d ended with %q, want %q", i, last, want)
		}
	}
	return ids
}

func distinct(t *testing.T, ids []int) {
	t.Helper()
	seen := map[int]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("worker ID %d leased twice: %v", id, ids)
		}
		seen[id] = true
	}
}

func TestFiveInstancesRedis(t *testing.T) {
	r := testserver.StartRedis(t)
	bin := build(t)
	distinct(t, startFive(t, bin, "-backend", "redis", "-redis", r.Addr(), "-service", "demo"))
	// Every ID was given back.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if keys, _ := r.Client(t).Keys(ctx, "coordkit:worker:{demo}:[0-9]*").Result(); len(keys) != 0 {
		t.Fatalf("leases left after SIGTERM: %v", keys)
	}
}

func TestFiveInstancesZooKeeper(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	bin := build(t)
	distinct(t, startFive(t, bin, "-backend", "zk", "-zk", z.Servers()[0], "-service", "demo"))
	c := z.DialT(t, 4*time.Second, nil)
	if kids, _, err := c.Children("/coordkit/workers/demo/ids"); err != nil || len(kids) != 0 {
		t.Fatalf("leases left after SIGTERM: %v, %v", kids, err)
	}
}

func TestCountExitsAndBadFlags(t *testing.T) {
	r := testserver.StartRedis(t)
	var out strings.Builder
	c := config{service: "demo", backend: "redis", redis: r.Addr(), layout: "sonyflake", every: time.Millisecond, count: 3}
	if err := run(context.Background(), c, &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\nid "); n != 3 {
		t.Fatalf("%d IDs printed:\n%s", n, out.String())
	}
	for _, bad := range []config{
		{service: "demo", backend: "etcd", layout: "twitter"},
		{service: "demo", backend: "redis", redis: r.Addr(), layout: "nope"},
		{service: "", backend: "redis", redis: r.Addr(), layout: "twitter"},
	} {
		if err := run(context.Background(), bad, &out); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
