package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/election"
	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
)

// TestElection runs election.Run over etcdlock Clients: three instances,
// each through a proxy of its own, run a singleton job. The leader's link
// is black-holed (a paused link: the connection stays open, nothing
// answers), then the next leader's is killed (connections cut, new ones
// refused). Each time, the leader's term ends, its job's ctx cancelled with
// a cause matching lock.ErrLockLost and etcdlock.ErrLeaseLost, before a
// follower's term begins; a follower takes over; one leader at a time,
// Leader names it, and term tokens (create revisions) strictly grow.
func TestElection(t *testing.T) {
	t.Parallel() // it mostly waits on timers
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := "leader"
	type started struct {
		id   string
		term *election.Term
	}
	var (
		mu     sync.Mutex // protects terms, causes
		terms  []*election.Term
		causes = map[*election.Term]error{}
	)
	starts := make(chan started, 10)
	proxies := map[string]*testserver.Proxy{}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for _, id := range []string{"a", "b", "c"} {
		proxy := testserver.StartProxy(t, server.Nodes()[0].Addr())
		proxies[id] = proxy
		e, err := election.New(newClient(t, dial(t, proxy.Addr())), key,
			election.WithIdentity(id), election.WithRetryPeriod(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.Run(ctx, func(jctx context.Context, term *election.Term) error {
				mu.Lock()
				for i, prev := range terms {
					select {
					case <-prev.Done():
					default:
						t.Errorf("%s's term begins while term %d of %s has not ended", id, i, prev.Identity())
					}
					if term.Token() <= prev.Token() {
						t.Errorf("%s's term token %d not above term %d's %d", id, term.Token(), i, prev.Token())
					}
				}
				terms = append(terms, term)
				mu.Unlock()
				if leader, token, err := e.Leader(jctx); err != nil || leader != id || token != term.Token() {
					t.Errorf("Leader in %s's term = %q, %d, %v; want %s, %d", id, leader, token, err, id, term.Token())
				}
				starts <- started{id, term}
				<-jctx.Done()
				mu.Lock()
				causes[term] = context.Cause(jctx)
				mu.Unlock()
				return jctx.Err()
			})
		}()
	}
	next := func(after time.Time) started {
		t.Helper()
		select {
		case s := <-starts:
			if !after.IsZero() {
				t.Logf("%s leads %v after the fault (TTL %v)", s.id, time.Since(after).Round(time.Millisecond), ttl)
			}
			return s
		case <-time.After(3 * ttl):
			t.Fatal("no leader within 3 TTLs")
			return started{}
		}
	}
	first := next(time.Time{})
	time.Sleep(ttl / 3) // keep-alives answered
	cut := time.Now()
	proxies[first.id].SetBlackhole(true)
	second := next(cut)
	if second.id == first.id {
		t.Fatalf("%s leads again through a black-holed link", first.id)
	}
	time.Sleep(ttl / 3)
	cut = time.Now()
	proxies[second.id].SetDropNew(true)
	proxies[second.id].Cut()
	third := next(cut)
	if third.id == first.id || third.id == second.id {
		t.Fatalf("%s leads again with its link down", third.id)
	}
	for _, p := range proxies {
		p.Reset()
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range []started{first, second} {
		if err := causes[s.term]; !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, etcdlock.ErrLeaseLost) {
			t.Fatalf("%s's job ended with cause %v, want lock.ErrLockLost and etcdlock.ErrLeaseLost", s.id, err)
		}
		if err := s.term.Err(); !errors.Is(err, etcdlock.ErrLeaseLost) {
			t.Fatalf("%s's term Err = %v, want ErrLeaseLost", s.id, err)
		}
	}
	if len(terms) != 3 {
		t.Fatalf("%d terms, want 3: %v", len(terms), fmt.Sprint(terms))
	}
}
