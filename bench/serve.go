package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	build := exec.Command("go", "build", "-o", bin, "./cmd/coordctl")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build coordctl: %v\n%s", err, out)
	}
	srv := exec.Command(bin, "serve", "--redis", r.Addr(), "--listen", "127.0.0.1:0", "--service", "bench-serve")
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
		Title: fmt.Sprintf("coordctl serve over HTTP, %d keep-alive connections on loopback (load generator in the same 2-core machine), median of %d × %v",
			conns, env.Rounds, env.Dur),
		Cols: []string{"endpoint", "requests/s", "IDs/s", "vs Leaf's 50k QPS/node", "p99 latency"},
	}
	for _, ep := range []struct {
		path string
		per  int
	}{{"/id/bench", 1}, {"/ids/bench?n=100", 100}} {
		// Warm up: the first segments, the connections.
		if _, _, err := load(client, base+ep.path, conns, 300*time.Millisecond); err != nil {
			return err
		}
		var rps, p99s []float64
		for range env.Rounds {
			n, p99, err := load(client, base+ep.path, conns, env.Dur)
			if err != nil {
				return err
			}
			rps = append(rps, float64(n)/env.Dur.Seconds())
			p99s = append(p99s, float64(p99.Microseconds()))
		}
		m := Median(rps)
		t.Row(ep.path, m, m*float64(ep.per), Ratio(m, leafQPS), fmt.Sprintf("%.2f ms", Median(p99s)/1000))
	}
	t.Print(env.Out)
	return nil
}

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
