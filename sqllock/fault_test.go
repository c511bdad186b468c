package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/watchdog"
)

// The fault tests break the shared servers (the tests run one at a time)
// and leave them running.

// faultTTL is the TTL of the leases under fault: a session lock's
// connection is checked every 300 ms.
const faultTTL = 900 * time.Millisecond

// slack covers scheduling on a loaded 2-core machine: every use is an
// upper bound on when a loss is seen or a lock comes free, and a starved
// process (make test-stress, load 23 on 2 cores) runs a goroutine a second
// late; 700 ms left less.
const slack = 1500 * time.Millisecond

type server interface {
	Kill()
	Pause() error
	Resume() error
	Start() error
	Restart() error
	Addr() string
}

func (b backend) server() server {
	if b.dialect == sqllock.MySQL {
		return maria
	}
	return pg
}

// keepRunning makes sure the shared server runs when the test ends.
func keepRunning(t *testing.T, s server) {
	t.Cleanup(func() {
		s.Resume()
		if err := s.Start(); err != nil {
			t.Errorf("starting the server again: %v", err)
		}
	})
}

// lossClock records when a lease's Lost closed.
type lossClock struct {
	done chan struct{}
	at   time.Time // written before done is closed
}

func watchLoss(t *testing.T, l lock.Lease) *lossClock {
	lc := &lossClock{done: make(chan struct{})}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		select {
		case <-l.Lost():
			lc.at = time.Now()
			close(lc.done)
		case <-stop:
		}
	}()
	return lc
}

// when waits for the loss (the caller saw Lost close) and returns its time.
func (lc *lossClock) when() time.Time {
	<-lc.done
	return lc.at
}

// obtainSoon keeps trying to obtain key with c from now on (each attempt
// bounded, so that a connection stuck on a dead server is given up), and
// sends the lease and when it was obtained.
type obtained struct {
	l   lock.Lease
	at  time.Time
	err error
}

func obtainSoon(ctx context.Context, c *sqllock.Client, key string) <-chan obtained {
	ch := make(chan obtained, 1)
	go func() {
		for {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			l, err := c.Obtain(actx, key, lock.WithTTL(faultTTL))
			cancel()
			if err == nil {
				ch <- obtained{l: l, at: time.Now()}
				return
			}
			if ctx.Err() != nil {
				ch <- obtained{err: err}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return ch
}

// shortDB is a pool whose connections give up fast on a dead server.
func (b backend) shortDB(t *testing.T) *sql.DB {
	if b.dialect == sqllock.MySQL {
		return b.openDB(t, "timeout=500ms")
	}
	return b.openDB(t, "connect_timeout=1")
}

// TestServerKilled: the database dies while a lock is held. The holder's
// Lost closes within the bound (a session lock: at its next check, a third
// of the TTL; the lease table: a TTL after its last renewal); once the
// server is back another owner obtains the lock, with a larger token
// (the fencing counters are durable).
func TestServerKilled(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		srv := b.server()
		keepRunning(t, srv)
		ctx := ctxTimeout(t, 60*time.Second)
		key := uniqueKey(t)
		a := b.client(t, b.shortDB(t))
		l := mustObtain(t, ctx, a, key, lock.WithTTL(faultTTL))
		loss := watchLoss(t, l)
		time.Sleep(faultTTL / 2) // a check or renewal happened since
		killed := time.Now()
		srv.Kill()
		bound := faultTTL / 3
		if b.lease {
			bound = faultTTL
		}
		waitClosed(t, l.Lost(), bound+slack, "Lost after the server was killed")
		t.Logf("lost %v after the kill (bound %v)", loss.when().Sub(killed), bound)
		if err := lock.LostCause(l); !errors.Is(err, lock.ErrLockLost) {
			t.Errorf("LostCause: %v", err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		got := <-obtainSoon(ctx, b.client(t, b.shortDB(t)), key)
		if got.err != nil {
			t.Fatalf("obtaining after the restart: %v", got.err)
		}
		defer got.l.Release(ctx)
		if got.l.Token() <= l.Token() {
			t.Errorf("token after the restart %d, not above %d", got.l.Token(), l.Token())
		}
		if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Release of the lost lease: %v, want lock.ErrNotHeld", err)
		}
	})
}

// TestServerPaused: the database stops answering (SIGSTOP) while a lock is
// held, longer than the TTL. The holder's Lost closes within the TTL;
// nobody else obtains the lock before that (here: before the server
// resumes), and afterwards another owner does, with a larger token.
func TestServerPaused(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		srv := b.server()
		keepRunning(t, srv)
		ctx := ctxTimeout(t, 60*time.Second)
		key := uniqueKey(t)
		a := b.client(t, b.shortDB(t))
		l := mustObtain(t, ctx, a, key, lock.WithTTL(faultTTL))
		loss := watchLoss(t, l)
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		other := obtainSoon(ctx, b.client(t, b.shortDB(t)), key)
		waitClosed(t, l.Lost(), faultTTL+slack, "Lost while the server is paused")
		t.Logf("lost %v after the pause (bound %v): %v", loss.when().Sub(paused), faultTTL, lock.LostCause(l))
		time.Sleep(300 * time.Millisecond)
		select {
		case got := <-other:
			t.Fatalf("obtained while the server was paused: %v", got.err)
		default:
		}
		resumed := time.Now()
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		got := <-other
		if got.err != nil {
			t.Fatalf("obtaining after the pause: %v", got.err)
		}
		defer got.l.Release(ctx)
		if got.at.Before(resumed) || got.at.Before(loss.when()) {
			t.Errorf("obtained at %v, before the loss (%v) or the resumption (%v)", got.at, loss.when(), resumed)
		}
		if got.l.Token() <= l.Token() {
			t.Errorf("token after the pause %d, not above %d", got.l.Token(), l.Token())
		}
	})
}

// TestServerRestarted: the database crashes and is back at once (faster
// than the holder's next check) while a lock is held. A session lock ends
// with the crash, but its fencing row says until when its holder may still
// believe it holds it: the next owner's Obtain waits until then, after the
// holder's Lost has closed, and gets a larger token. The lease table keeps
// its row through the restart: the holder's renewals go on, nobody else
// obtains the lock, and it is released as usual.
func TestServerRestarted(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		srv := b.server()
		keepRunning(t, srv)
		if b.lease {
			// Renewals that fail for a whole TTL on a starved host (each
			// one bounded by TTL/3, the reconnection after the restart
			// by connect_timeout) end the lease, its holder told
			// (watchdog.ErrExpired): that run shows nothing of the
			// restart, and the case runs again, three times at most.
			// Any other outcome decides it.
			for attempt := 1; !leaseOutlivesRestart(t, b, srv, attempt); attempt++ {
				if attempt == 3 {
					t.Fatal("three runs in a row, the holder's renewals failed for a whole TTL after a restart (watchdog.ErrExpired): they never got through once the database was back")
				}
			}
			return
		}
		ctx := ctxTimeout(t, 60*time.Second)
		key := uniqueKey(t)
		a := b.client(t, b.shortDB(t))
		l := mustObtain(t, ctx, a, key, lock.WithTTL(faultTTL))
		loss := watchLoss(t, l)
		crashed := time.Now()
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		got := <-obtainSoon(ctx, b.client(t, b.shortDB(t)), key)
		if got.err != nil {
			t.Fatalf("obtaining after the restart: %v", got.err)
		}
		defer got.l.Release(ctx)
		waitClosed(t, l.Lost(), faultTTL/3+slack, "Lost after the restart")
		lost := loss.when()
		t.Logf("restart took %v; the old holder's loss %v after the crash; the next owner's hold %v after it",
			restarted.Sub(crashed), lost.Sub(crashed), got.at.Sub(crashed))
		if got.l.Token() <= l.Token() {
			t.Errorf("token after the restart %d, not above %d", got.l.Token(), l.Token())
		}
		if got.at.Before(lost) {
			t.Errorf("another owner held the lock %v before the holder's loss", lost.Sub(got.at))
		}
	})
}

// leaseOutlivesRestart is TestServerRestarted on the lease table: a hold
// with a 3 s TTL (a restart on a loaded machine takes longer than
// faultTTL: the case failed 1 run in 4 at 900 ms, load 6), the database
// restarted, then two TTLs: the row is there only if the renewals went on,
// and another owner's TryObtain is refused. It returns false (run again)
// when the renewals failed for a whole TTL, the holder told (make
// test-stress loaded-2 at 9f26064: another owner obtained the lock after a
// 221 ms restart); it fails the test on anything else that lets another
// owner in.
func leaseOutlivesRestart(t *testing.T, b backend, srv server, attempt int) bool {
	t.Helper()
	const ttl = 3 * time.Second
	ctx := ctxTimeout(t, 60*time.Second)
	key := fmt.Sprintf("%s-%d", uniqueKey(t), attempt)
	a := b.client(t, b.shortDB(t))
	l := mustObtain(t, ctx, a, key, lock.WithTTL(ttl))
	crashed := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(crashed).Round(time.Millisecond)
	time.Sleep(2 * ttl)
	other := b.client(t, nil)
	o, err := other.TryObtain(ctx, key)
	cause := lock.LostCause(l)
	switch {
	case err == nil && cause == nil:
		t.Fatalf("another owner obtained the lock after a %v restart while the holder still believes it holds it", took)
	case err == nil && errors.Is(cause, watchdog.ErrExpired):
		// The last renewal before the crash was at most TTL/3 earlier,
		// and none after it got through in time: a starved host, or a
		// restart that outlasted the lease (2TTL/3 or more).
		t.Logf("run %d: restart took %v; the renewals failed for a whole TTL (%v), the holder told; another owner obtained the lock", attempt, took, cause)
		o.Release(ctx)
		return false
	case err == nil:
		t.Fatalf("another owner obtained the lock after a %v restart; the holder's loss: %v (want the row kept and renewed)", took, cause)
	case !errors.Is(err, lock.ErrNotObtained):
		t.Fatalf("TryObtain by another owner after a %v restart: %v, want lock.ErrNotObtained", took, err)
	case cause != nil:
		t.Fatalf("the lease did not survive a %v restart: %v", took, cause)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after the restart: %v", err)
	}
	mustObtain(t, ctx, other, key).Release(ctx)
	return true
}

// TestConnectionCut: the holder's connections are cut by a proxy. A
// session lock ends with its connection: Lost closes at the next check;
// another owner obtains the lock once the fencing row's expiry has passed,
// after that loss, with a larger token. The lease table does not depend on
// a connection: its renewals reconnect and the lease is not lost.
func TestConnectionCut(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		key := uniqueKey(t)
		px := testserver.StartProxy(t, b.server().Addr())
		var db *sql.DB
		if b.dialect == sqllock.MySQL {
			db = openDB(t, "mysql", maria.DSNAt(px.Addr(), "timeout=500ms"))
		} else {
			db = openDB(t, "pgx", pg.DSNAt(px.Addr(), "connect_timeout=1"))
		}
		ttl := faultTTL
		if b.lease {
			// The lease survives only if a renewal reconnects through
			// the proxy (a new PostgreSQL backend forked, authenticated)
			// before the lease's end: within 900 ms failed on a loaded
			// host (load 23 on 2 cores); 2 s keeps the point.
			ttl = 2 * time.Second
		}
		if b.lease {
			// Renewals that all fail for a whole TTL on a starved host
			// (each bounded by TTL/3, its reconnection by the dial
			// timeout) end the lease, its holder told
			// (watchdog.ErrExpired): that run shows nothing of the cut,
			// and the case runs again, three times at most, as
			// TestServerRestarted's does. Any other loss fails it.
			c := b.client(t, db)
			for attempt := 1; ; attempt++ {
				l := mustObtain(t, ctx, c, fmt.Sprintf("%s-%d", key, attempt), lock.WithTTL(ttl))
				px.Cut()
				time.Sleep(ttl + ttl/2) // past the lease's end: renewed since the cut
				cause := lock.LostCause(l)
				if cause == nil {
					if err := l.Release(ctx); err != nil {
						t.Fatalf("Release after the cut: %v", err)
					}
					return
				}
				if !errors.Is(cause, watchdog.ErrExpired) || attempt == 3 {
					t.Fatalf("run %d: the lease table lost its lease to a cut connection: %v", attempt, cause)
				}
				t.Logf("run %d: the renewals after the cut failed for a whole TTL (%v), the holder told; again", attempt, cause)
			}
		}
		l := mustObtain(t, ctx, b.client(t, db), key, lock.WithTTL(ttl))
		cut := time.Now()
		px.Cut()
		loss := watchLoss(t, l)
		other := obtainSoon(ctx, b.client(t, nil), key)
		waitClosed(t, l.Lost(), faultTTL/3+slack, "Lost after the cut")
		if err := lock.LostCause(l); !errors.Is(err, sqllock.ErrSessionLost) || !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("LostCause: %v, want ErrSessionLost and lock.ErrNotHeld", err)
		}
		next := <-other
		if next.err != nil {
			t.Fatal(next.err)
		}
		defer next.l.Release(ctx)
		t.Logf("lost %v after the cut, the next owner's hold began %v after it", loss.when().Sub(cut), next.at.Sub(cut))
		if next.at.Before(loss.when()) {
			t.Errorf("the next owner held the lock %v before the holder's loss", loss.when().Sub(next.at))
		}
		if next.l.Token() <= l.Token() {
			t.Errorf("token after the cut %d, not above %d", next.l.Token(), l.Token())
		}
	})
}
