package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Leaf's published figure for its HTTP service: about 50,000 QPS per node
// (4 cores, 8 GB), IDs drawn from segments in memory.
const leafQPS = 50000

func init() {
	register(Suite{Name: "serve", Run: runServe})
}

// runServe builds coordctl, serves IDs from the run's Redis, and loads it
// from 32 keep-alive connections on loopback: /id/{tag} (one ID per request)
// and /ids/{tag}?n=100 (a batch).
func runServe(env *Env) error {
	r, err := env.Redis()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "coordkit-bench-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "coordctl")
	// cmd/coordctl is a module of its own (its go.mod replaces coordkit
	// with this checkout): build it from its directory.
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "cmd", "coordctl")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build coordctl: %v\n%s", err, out)
	}
	srv := exec.Command(bin, "serve", "--redis", r.Addr(), "--listen", "127.0.0.1:0", "--service", "bench-serve")
	// coordctl serves only registered tags: the bench's tag comes from the
	// environment, so that the suite still runs builds without --tags.
	srv.Env = append(os.Environ(), "COORDKIT_TAGS=bench")
	stdout, err := srv.StdoutPipe()
	if err != nil {
		return err
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() {
		srv.Process.Signal(os.Interrupt)
		srv.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		return fmt.Errorf("coordctl serve printed nothing")
	}
	var base string
	if _, err := fmt.Sscanf(lines.Text(), "serving IDs on %s", &base); err != nil {
		return fmt.Errorf("coordctl serve said %q", lines.Text())
	}
	go io.Copy(io.Discard, stdout) // the shutdown line

	const conns = 32
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	t := Table{
		Title: fmt.Sprintf("coordctl serve over HTTP, %d keep-alive connections on loopback (load generator in the same 2-core machine), median of %d × %v, endpoints interleaved in each round",
			conns, env.Rounds, env.Dur),
		Cols: []string{"endpoint", "requests/s", "IDs/s", "vs the empty handler", "vs Leaf's 50k QPS/node", "p99 latency",
			"server CPU per request", "CPU vs the empty handler"},
	}
	// /livez answers "ok" and does nothing else: the floor of the server
	// itself (net/http, routing, the timing of each request) on this
	// machine. Each round loads every endpoint in turn, so that a change in
	// the machine's load shifts the floor and the endpoints alike; the ratio
	// is the median of the rounds' ratios.
	eps := []struct {
		path string
		per  int
	}{{"/livez", 0}, {"/id/bench", 1}, {"/ids/bench?n=100", 100}}
	rps := make([][]float64, len(eps))
	p99s := make([][]float64, len(eps))
	ratios := make([][]float64, len(eps))
	cpus := make([][]float64, len(eps))
	for _, ep := range eps { // warm up: the first segments, the connections
		if _, _, err := load(client, base+ep.path, conns, 300*time.Millisecond); err != nil {
			return err
		}
	}
	for range env.Rounds {
		for i, ep := range eps {
			cpu0 := procCPU(srv.Process.Pid)
			n, p99, err := load(client, base+ep.path, conns, env.Dur)
			if err != nil {
				return err
			}
			cpus[i] = append(cpus[i], float64(procCPU(srv.Process.Pid)-cpu0)/float64(max(n, 1)))
			rps[i] = append(rps[i], float64(n)/env.Dur.Seconds())
			p99s[i] = append(p99s[i], float64(p99.Microseconds()))
			ratios[i] = append(ratios[i], rps[i][len(rps[i])-1]/rps[0][len(rps[0])-1])
		}
	}
	for i, ep := range eps {
		m, p99 := Median(rps[i]), fmt.Sprintf("%.2f ms", Median(p99s[i])/1000)
		cpu := fmt.Sprintf("%.1f µs", Median(cpus[i])/1e3)
		if ep.per == 0 {
			t.Row(ep.path+" (empty handler)", m, "-", "1.00×", "-", p99, cpu, "1.00×")
			continue
		}
		t.Row(ep.path, m, m*float64(ep.per), fmt.Sprintf("%.2f×", Median(ratios[i])), Ratio(m, leafQPS), p99, cpu,
			Ratio(Median(cpus[i]), Median(cpus[0])))
	}
	t.Print(env.Out)
	return nil
}

// procCPU returns the user and system CPU time the process has used so far
// (all its threads, /proc/<pid>/stat), in ns; 0 if it cannot be read. The
// server's CPU per request hardly depends on what else the machine runs,
// unlike its rate.
func procCPU(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (in parentheses, which may hold
	// spaces): utime and stime are the 12th and 13th, in clock ticks.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return (u + s) * int64(time.Second) / clockTicks
}

// clockTicks is the kernel's USER_HZ: 100 on Linux everywhere in use.
const clockTicks = 100

// load runs GETs of url from conns goroutines for d and returns the number
// of successful requests and the 99th percentile latency.
func load(c *http.Client, url string, conns int, d time.Duration) (int64, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var n atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			defer func() {
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				start := time.Now()
				resp, err := c.Get(url)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					mu.Lock()
					firstErr = fmt.Errorf("%s: status %d", url, resp.StatusCode)
					mu.Unlock()
					return
				}
				local = append(local, time.Since(start))
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	return n.Load(), percentile(lat, 0.99), nil
}
