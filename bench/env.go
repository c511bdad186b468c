package main

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
)

// Env is what a suite gets: the run's settings and servers started on first
// use and shared by every suite of the run, so that coordkit and its peers
// meet the same servers.
type Env struct {
	Out    io.Writer
	Rounds int
	Dur    time.Duration

	mu      sync.Mutex // protects the servers below
	redis   *testserver.Redis
	masters []*testserver.Redis
	zk      *testserver.ZooKeeper
}

func newEnv(rounds int, dur time.Duration) *Env {
	return &Env{Out: os.Stdout, Rounds: max(rounds, 1), Dur: dur}
}

// Redis returns the run's single Redis server, starting it on first use.
func (e *Env) Redis() (*testserver.Redis, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.redis == nil {
		r, err := testserver.NewRedis()
		if err != nil {
			return nil, err
		}
		e.redis = r
	}
	return e.redis, nil
}

// Masters returns n independent Redis masters (for Redlock), starting the
// missing ones on first use; the first n of the run's masters are reused.
func (e *Env) Masters(n int) ([]*testserver.Redis, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.masters) < n {
		r, err := testserver.NewRedis()
		if err != nil {
			return nil, err
		}
		e.masters = append(e.masters, r)
	}
	return e.masters[:n], nil
}

// ZooKeeper returns the run's standalone ZooKeeper, starting it on first use.
func (e *Env) ZooKeeper() (*testserver.ZooKeeper, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.zk == nil {
		z, err := testserver.NewZooKeeper()
		if err != nil {
			return nil, err
		}
		e.zk = z
	}
	return e.zk, nil
}

// Close stops every server the run started. It is idempotent.
func (e *Env) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.redis != nil {
		e.redis.Close()
		e.redis = nil
	}
	for _, r := range e.masters {
		r.Close()
	}
	e.masters = nil
	if e.zk != nil {
		e.zk.Close()
		e.zk = nil
	}
}
