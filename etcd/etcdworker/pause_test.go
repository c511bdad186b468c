package etcdworker_test

// A holder process stopped (SIGSTOP) past its etcd lease, while another
// process takes the worker ID over and issues IDs, must issue nothing once
// it resumes (SIGCONT), before or after the goroutine that closes Lost has
// run: workerid's generators check the lease's deadline on every call
// (idgen/workerid's pause_test.go does the same on Redis, ZooKeeper and
// SQL). The holder is this test binary, started again with pauseHolderEnv
// set (TestMain runs pauseHolder then).

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coordkit/coordkit/etcd/etcdworker"
	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
)

// pauseHolderEnv holds "<endpoint,...> <prefix>".
const pauseHolderEnv = "ETCDWORKER_TEST_PAUSE_HOLDER"

const (
	pauseService = "paused"
	ringSize     = 1 << 16 // IDs each issuing goroutine keeps: its last ones
	issuers      = 4
)

// pauseHolder runs in the holder process: it leases worker ID 0, prints
// "ready", then "issuing" once it has issued an ID, and issues IDs from
// several goroutines until the generator stops (the lease is lost); then
// it writes the last IDs each goroutine issued to stdout (8-byte
// big-endian) and returns its exit code.
func pauseHolder(spec string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "holder:", err); return 2 }
	f := strings.Fields(spec)
	if len(f) != 2 {
		return fail(fmt.Errorf("bad %s %q", pauseHolderEnv, spec))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(f[0], ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	l, err := etcdworker.New(cli, etcdworker.WithMax(0), etcdworker.WithTTL(ttl), etcdworker.WithPrefix(f[1]))
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	lease, err := l.Lease(ctx, pauseService)
	if err != nil {
		return fail(err)
	}
	sf, err := lease.NewSnowflake(ctx, idgen.LayoutWorker10)
	if err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	rings := make([][]int64, issuers)
	var first sync.Once // "issuing": the test stops this process only once it has
	var wg sync.WaitGroup
	for g := range rings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ring := make([]int64, 0, ringSize)
			for i := 0; ; i++ {
				id, err := sf.Next()
				if err != nil {
					break // lost: the generator stopped
				}
				first.Do(func() { fmt.Println("issuing") })
				if len(ring) < ringSize {
					ring = append(ring, id)
				} else {
					ring[i%ringSize] = id
				}
			}
			rings[g] = ring
		}()
	}
	wg.Wait()
	w := bufio.NewWriter(os.Stdout)
	for _, r := range rings {
		for _, id := range r {
			binary.Write(w, binary.BigEndian, id)
		}
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	os.Stdout.Close() // the test reads until here
	lease.Release(ctx)
	return 0
}

func TestPausedHolderIssuesNothing(t *testing.T) {
	ctx := ctxFor(t, 60*time.Second)
	p := prefix(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), pauseHolderEnv+"="+strings.Join(server.Endpoints(), ",")+" "+p)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if stopped {
			cmd.Process.Signal(syscall.SIGCONT)
		}
		cmd.Process.Kill() // by its PID: this test's own child
		cmd.Wait()
	})
	r := bufio.NewReader(out)
	for _, want := range []string{"ready\n", "issuing\n"} {
		if line, err := r.ReadString('\n'); err != nil || line != want {
			t.Fatalf("holder: %q %v, want %q", line, err, want)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped = true
	paused := time.Now()
	// No keep-alives: the server expires the holder's lease a TTL after
	// the last one, and the ID is free.
	next := newLeaser(t, dial(t, server.Endpoints()...), p, etcdworker.WithMax(0))
	var lease *workerid.Lease
	for lease == nil {
		l, err := next.Lease(ctx, pauseService)
		switch {
		case err == nil:
			lease = l
		case errors.Is(err, workerid.ErrExhausted):
			time.Sleep(20 * time.Millisecond)
		default:
			t.Fatal(err)
		}
	}
	t.Logf("taken over %v after the pause (TTL %v)", time.Since(paused).Round(time.Millisecond), ttl)
	defer lease.Release(ctx)
	sf, err := lease.NewSnowflake(ctx, idgen.LayoutWorker10)
	if err != nil {
		t.Fatal(err)
	}
	// The new holder issues as fast as it can, from before the
	// resumption until after the old holder has stopped.
	done := make(chan struct{})
	issued := make(chan []int64, 1)
	go func() {
		var ids []int64
		for {
			select {
			case <-done:
				issued <- ids
				return
			default:
			}
			id, err := sf.Next()
			if err != nil {
				t.Error(err)
				issued <- ids
				return
			}
			ids = append(ids, id)
		}
	}()
	time.Sleep(20 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	old, err := io.ReadAll(r) // until the old holder has stopped issuing and written its IDs
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	close(done)
	ids := <-issued
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	slices.Sort(ids)
	dups := 0
	for i := 0; i+8 <= len(old); i += 8 {
		if _, ok := slices.BinarySearch(ids, int64(binary.BigEndian.Uint64(old[i:]))); ok {
			dups++
		}
	}
	if dups > 0 {
		t.Fatalf("the holder stopped past its lease issued %d IDs on resumption that the new holder also issued (of %d kept, %d new)", dups, len(old)/8, len(ids))
	}
	if len(ids) == 0 || len(old) == 0 {
		t.Fatalf("nothing compared: %d old IDs, %d new", len(old)/8, len(ids))
	}
}
