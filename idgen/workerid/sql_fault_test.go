package workerid_test

// Faults of the SQL leaser: the database paused, killed and restarted, a
// holder cut off from it. They break the package's shared servers (the
// package's tests run one at a time) and start them again before they end.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/watchdog"
)

// faultTTL is the TTL of the leases under fault: renewed every 300 ms.
const faultTTL = 900 * time.Millisecond

// slack covers scheduling on a loaded 2-core machine: every use bounds when
// a lease's Lost closes, which a starved process (make test-stress, load 23
// on 2 cores) sees a second late; 500 ms left less. Issuing stops at the
// lease's deadline whatever the goroutine's lateness (idgen.WithLeaseDeadline).
const slack = 1500 * time.Millisecond

// keepRunning makes sure the server runs when the test ends.
func keepRunning(t *testing.T, srv sqlServer) {
	t.Cleanup(func() {
		srv.Resume()
		if err := srv.Start(); err != nil {
			t.Errorf("starting the server again: %v", err)
		}
	})
}

// aheadHolder leases worker 0 of "svc" on table and issues n IDs on a
// generator whose clock runs ahead (a millisecond per reading, from t1) and
// saves no periodic checkpoint: only the final mark, stored after a loss or
// at Release, keeps the ID's next holder above them.
func aheadHolder(t *testing.T, s sqlDB, table string, t1 time.Time, n int, opts ...workerid.Option) (*workerid.Lease, *idgen.Snowflake, []int64) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	opts = append([]workerid.Option{workerid.WithMax(0), workerid.WithCheckpoint(time.Hour)}, opts...)
	a, err := s.leaser(t, table, opts...).Lease(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Release(ctx)
	})
	sf, err := a.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock((&stepClock{t: t1, step: time.Millisecond}).Now))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 0, n)
	for range n {
		id, err := sf.Next()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return a, sf, ids
}

// waitMark waits until the stored mark of a's ID has reached want.
func waitMark(t *testing.T, a *workerid.Lease, want time.Time, within time.Duration) {
	t.Helper()
	ctx := ctxT(t, within+time.Second)
	deadline := time.Now().Add(within)
	for {
		mark, err := a.HighWater().Load(ctx)
		if err == nil && !mark.Before(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lost holder's final mark %v not stored within %v: stored %v (%v)", want, within, mark, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// successorIssuesNoneOf leases worker 0 of "svc" on table (waiting until
// the row is free) and checks that its generator, on a clock that reads t1
// (behind the IDs in before) and borrows up to a second, starts above the
// stored mark and issues none of before.
func successorIssuesNoneOf(t *testing.T, s sqlDB, table string, t1 time.Time, before []int64) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	l := s.leaser(t, table, workerid.WithMax(0))
	b := leaseWhenFree(t, ctx, func(ctx context.Context, _ string) (*workerid.Lease, error) { return l.Lease(ctx, "svc") })
	release(t, b)
	mark, err := b.HighWater().Load(ctx)
	last := idgen.LayoutWorker10.Decompose(before[len(before)-1]).Time
	if err != nil || mark.Before(last) {
		t.Fatalf("the successor's mark %v (%v) is below the last ID issued before, at %v", mark, err, last)
	}
	sf, err := b.NewSnowflake(ctx, idgen.LayoutWorker10, idgen.WithClock((&stepClock{t: t1, step: time.Millisecond}).Now), idgen.WithBorrow(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n := reissued(t, sf, before); n > 0 {
		t.Fatalf("the successor reissued %d of the %d IDs its predecessor issued", n, len(before))
	}
}

// TestSQLServerPausedPastTTL: the database stops answering (SIGSTOP) for
// longer than the TTL. The holder's renewals hang; it loses the lease
// (ErrExpired) within 90 % of the TTL after its last renewal, before the
// row expires on the database's clock, and its generator stops. Once the
// database is back, the row has expired: another leaser takes the ID, and
// starts above the mark the lost holder stored after the loss.
func TestSQLServerPausedPastTTL(t *testing.T) {
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		table := s.newTable(t)
		srv := s.srv()
		keepRunning(t, srv)
		t1 := time.Now().Truncate(time.Millisecond)
		a, sfA, ids := aheadHolder(t, s, table, t1, 300, workerid.WithTTL(faultTTL))

		paused := time.Now()
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		waitLost(t, a, 3*faultTTL)
		if d := time.Since(paused); d > faultTTL+slack {
			t.Fatalf("lease lost %v after the pause; the row expires %v after the last renewal", d, faultTTL)
		}
		if !errors.Is(a.Err(), watchdog.ErrExpired) {
			t.Fatalf("cause %v, want ErrExpired", a.Err())
		}
		if _, err := sfA.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
			t.Fatalf("Next after the loss: %v", err)
		}
		time.Sleep(time.Until(paused.Add(faultTTL + 200*time.Millisecond))) // past the row's expiry
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		waitMark(t, a, sfA.HighWater(), 10*time.Second)
		successorIssuesNoneOf(t, s, table, t1, ids)
	})
}

// TestSQLServerKilled: the database crashes (SIGKILL) and is started again
// with its data. Back within the TTL, the lease survives: the watchdog's
// renewals fail meanwhile and succeed again on new connections, and the
// generator keeps issuing. Down for longer, the lease is lost, the row
// (kept with its mark) has expired by the database's clock when it is
// back, and the ID's next holder starts above the lost holder's final
// mark: no ID repeats across the re-lease.
func TestSQLServerKilled(t *testing.T) {
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		t.Run("back within the TTL", func(t *testing.T) {
			const ttl = 15 * time.Second // a restart takes seconds
			table := s.newTable(t)
			srv := s.srv()
			keepRunning(t, srv)
			ctx := ctxT(t, 60*time.Second)
			a, err := s.leaser(t, table, workerid.WithTTL(ttl)).Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			release(t, a)
			sf, err := a.NewSnowflake(ctx, idgen.LayoutWorker10)
			if err != nil {
				t.Fatal(err)
			}
			before, err := sf.Next()
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			observer := s.leaser(t, table)
			holders, err := observer.List(ctx, "svc")
			if err != nil || len(holders) != 1 || holders[0].Owner == "" {
				t.Fatalf("the row after the restart: %+v, %v", holders, err)
			}
			expiry := time.Now().Add(holders[0].TTL)
			// Wait for a renewal on the restarted server.
			for time.Now().Add(holders[0].TTL).Before(expiry.Add(time.Second)) {
				select {
				case <-a.Lost():
					t.Fatalf("lease lost across a restart within the TTL: %v", a.Err())
				case <-time.After(100 * time.Millisecond):
				}
				if holders, err = observer.List(ctx, "svc"); err != nil || len(holders) != 1 {
					t.Fatalf("List: %+v, %v", holders, err)
				}
			}
			if a.Err() != nil {
				t.Fatalf("lease lost: %v", a.Err())
			}
			if id, err := sf.Next(); err != nil || id <= before {
				t.Fatalf("Next after the restart: %d (before %d), %v", id, before, err)
			}
		})

		t.Run("down past the TTL", func(t *testing.T) {
			table := s.newTable(t)
			srv := s.srv()
			keepRunning(t, srv)
			t1 := time.Now().Truncate(time.Millisecond)
			a, sfA, ids := aheadHolder(t, s, table, t1, 300, workerid.WithTTL(faultTTL))
			killed := time.Now()
			srv.Kill()
			waitLost(t, a, 3*faultTTL)
			if d := time.Since(killed); d > faultTTL+slack {
				t.Fatalf("lease lost %v after the kill; the row expires %v after the last renewal", d, faultTTL)
			}
			if _, err := sfA.Next(); !errors.Is(err, idgen.ErrLeaseLost) {
				t.Fatalf("Next after the loss: %v", err)
			}
			time.Sleep(time.Until(killed.Add(faultTTL + 200*time.Millisecond)))
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			// The final mark is retried for 10 s after the loss.
			waitMark(t, a, sfA.HighWater(), 10*time.Second)
			successorIssuesNoneOf(t, s, table, t1, ids)
		})
	})
}

// TestSQLHolderCutOff: a holder stops renewing (its connection to the
// database goes silent: a proxy swallows every byte) while it issues IDs.
// It loses the lease within 90 % of the TTL, its generator stops, and its
// final mark cannot be stored; once the row has expired another leaser
// takes the ID and starts above the mark the holder's last checkpoint
// stored, after every ID the holder issued.
func TestSQLHolderCutOff(t *testing.T) {
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		ctx := ctxT(t, 60*time.Second)
		table := s.newTable(t)
		p := testserver.StartProxy(t, s.srv().Addr())
		la := s.leaserOn(t, s.open(t, p.Addr()), table, workerid.WithMax(0), workerid.WithTTL(faultTTL), workerid.WithCheckpoint(50*time.Millisecond))
		a, err := la.Lease(ctx, "svc")
		if err != nil {
			t.Fatal(err)
		}
		sfA, err := a.NewSnowflake(ctx, idgen.LayoutWorker10)
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		done := issueUntilError(sfA, started)
		<-started
		// A checkpoint stored (every 50 ms while IDs are issued; on a slow
		// machine the first may take longer than a fixed sleep), then a few
		// more.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if mark, err := a.HighWater().Load(ctx); err == nil && !mark.IsZero() {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("no checkpoint stored in 10 s of issuing: %v, %v", mark, err)
			}
		}
		time.Sleep(150 * time.Millisecond)
		cut := time.Now()
		p.SetBlackhole(true)
		// The row's expiry, read from the database once the holder can no
		// longer renew: no other leaser may take the ID before it. (The
		// holder renews every TTL/3, but on a loaded host its last renewal
		// before the cut may be older than that.)
		q := "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires) FROM " + table + " WHERE service = ? AND id = ?"
		if s.dialect == sqllock.Postgres {
			q = "SELECT (EXTRACT(EPOCH FROM (expires - now())) * 1000000)::bigint FROM " + table + " WHERE service = $1 AND id = $2"
		}
		sent := time.Now()
		var leftUS int64
		if err := s.open(t, s.srv().Addr()).QueryRowContext(ctx, q, a.Service(), a.ID()).Scan(&leftUS); err != nil {
			t.Fatal(err)
		}
		expiry := sent.Add(time.Duration(leftUS) * time.Microsecond) // no later than the row's
		waitLost(t, a, 3*faultTTL)
		if d := time.Since(cut); d > faultTTL+slack {
			t.Fatalf("lease lost %v after the cut; the row expires %v after the last renewal", d, faultTTL)
		}
		r := <-done
		if !errors.Is(r.err, idgen.ErrLeaseLost) {
			t.Fatalf("Next after the loss: %v", r.err)
		}

		lb := s.leaser(t, table, workerid.WithMax(0))
		b := leaseWhenFree(t, ctx, func(ctx context.Context, _ string) (*workerid.Lease, error) { return lb.Lease(ctx, "svc") })
		release(t, b)
		if taken := time.Now(); taken.Before(expiry) {
			t.Fatalf("the ID was taken %v after the holder was cut off, %v before its row's expiry", taken.Sub(cut), expiry.Sub(taken))
		}
		mark, err := b.HighWater().Load(ctx)
		if err != nil || mark.IsZero() {
			t.Fatalf("the cut-off holder's checkpointed mark: %v, %v", mark, err)
		}
		sfB, err := b.NewSnowflake(ctx, idgen.LayoutWorker10)
		if err != nil {
			t.Fatal(err)
		}
		first, err := sfB.Next()
		if err != nil || idgen.LayoutWorker10.Decompose(first).Time.Before(mark) {
			t.Fatalf("the successor's first ID %d (%v) is below the mark %v", first, err, mark)
		}
		if n := reissued(t, sfB, r.ids); n > 0 {
			t.Fatalf("the successor reissued %d of the cut-off holder's %d IDs", n, len(r.ids))
		}
		// The holder, connected again, gives back nothing of the
		// successor's: its Release finds the row another's.
		p.SetBlackhole(false)
		p.Cut()
		if err := a.Release(ctx); err != nil {
			t.Fatalf("Release of the lost lease: %v", err)
		}
		if holders, err := lb.List(ctx, "svc"); err != nil || len(holders) != 1 || b.Err() != nil {
			t.Fatalf("after the old holder's Release: %+v, %v, successor %v", holders, err, b.Err())
		}
	})
}

// TestCheckpointSlowerThanInterval: a database that takes longer to answer
// a save than the checkpoint interval (a proxy adds 40 ms each way, the
// interval is 50 ms) still gets the mark: a save is not cut off at the
// interval, so that the holder's IDs stay covered by a stored mark however
// slow the database is.
func TestCheckpointSlowerThanInterval(t *testing.T) {
	forEachSQL(t, func(t *testing.T, s sqlDB) {
		ctx := ctxT(t, 60*time.Second)
		table := s.newTable(t)
		p := testserver.StartProxy(t, s.srv().Addr())
		p.SetLatency(40 * time.Millisecond)
		la := s.leaserOn(t, s.open(t, p.Addr()), table, workerid.WithMax(0), workerid.WithTTL(5*time.Second),
			workerid.WithCheckpoint(50*time.Millisecond))
		a, err := la.Lease(ctx, "svc")
		if err != nil {
			t.Fatal(err)
		}
		defer release(t, a)
		sf, err := a.NewSnowflake(ctx, idgen.LayoutWorker10)
		if err != nil {
			t.Fatal(err)
		}
		first, err := sf.Next()
		if err != nil {
			t.Fatal(err)
		}
		want := idgen.LayoutWorker10.Decompose(first).Time
		deadline := time.Now().Add(5 * time.Second)
		for {
			mark, err := a.HighWater().Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !mark.Before(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no checkpoint of the mark %v stored in 5 s with saves slower than the interval: %v", want, mark)
			}
			sf.Next()
			time.Sleep(10 * time.Millisecond)
		}
	})
}
