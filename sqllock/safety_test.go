package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/sqllock"
)

// TestHotKeyMutualExclusion: 16 goroutines over 4 Clients, each Client on
// a pool of its own (several connections), take one key in turn and do a
// read-modify-write of a counter row that is wrong if two sections
// overlap: read, pause, write the value read plus one. The counter must
// end at the number of sections, no two sections may overlap in process,
// and the tokens seen inside the sections must increase.
func TestHotKeyMutualExclusion(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		const clients, perClient, sections = 4, 4, 8
		ctx := ctxTimeout(t, 60*time.Second)
		key := uniqueKey(t)
		admin := b.openDB(t)
		table := "hot_" + b.name
		if _, err := admin.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ExecContext(ctx, "CREATE TABLE "+table+" (id INT PRIMARY KEY, v INT NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ExecContext(ctx, "INSERT INTO "+table+" (id, v) VALUES (1, 0)"); err != nil {
			t.Fatal(err)
		}
		read := "SELECT v FROM " + table + " WHERE id = 1"
		write := "UPDATE " + table + " SET v = ? WHERE id = 1"
		if b.dialect == sqllock.Postgres {
			write = "UPDATE " + table + " SET v = $1 WHERE id = 1"
		}
		var inside atomic.Int32
		var lastToken atomic.Int64
		var overlaps, backwards atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, clients*perClient)
		for i := 0; i < clients; i++ {
			db := b.openDB(t)
			db.SetMaxOpenConns(8)
			c := b.client(t, db, sqllock.WithPoll(func(int) time.Duration { return 2 * time.Millisecond }))
			for j := 0; j < perClient; j++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; n < sections; n++ {
						err := lock.Do(ctx, c, key, func(ctx context.Context) error {
							if inside.Add(1) != 1 {
								overlaps.Add(1)
							}
							defer inside.Add(-1)
							return section(ctx, db, read, write, &lastToken, &backwards, c, key)
						})
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var v int
		if err := admin.QueryRowContext(ctx, read).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if want := clients * perClient * sections; v != want || overlaps.Load() != 0 || backwards.Load() != 0 {
			t.Fatalf("counter %d (want %d), %d overlapping sections, %d tokens not above the one before",
				v, want, overlaps.Load(), backwards.Load())
		}
	})
}

// section is one critical section: a read-modify-write of the counter that
// two concurrent holders would break (a lost update), and the token check.
func section(ctx context.Context, db *sql.DB, read, write string, last *atomic.Int64, backwards *atomic.Int32, c lock.Locker, key string) error {
	l, err := c.TryObtain(ctx, key) // re-entry: the section's own lease, same token
	if err != nil {
		return fmt.Errorf("re-entry inside Do: %w", err)
	}
	defer l.Release(ctx)
	if prev := last.Swap(l.Token()); l.Token() <= prev {
		backwards.Add(1)
	}
	var v int
	if err := db.QueryRowContext(ctx, read).Scan(&v); err != nil {
		return err
	}
	time.Sleep(time.Millisecond)
	_, err = db.ExecContext(ctx, write, v+1)
	return err
}

// TestLeaseTakenOnlyAfterExpiry: a lease-table row is taken over only once
// its expiry has passed by the database's clock. The holder's link is cut
// (it cannot renew), its row's time left is read from the database, and a
// second owner polls TryObtain; a grant whose answer came back before the
// row's expiry (both judged on this host's clock, which the loopback
// database shares: the expiry from before the read was sent, the grant
// from after its answer) proves a takeover of a live lease. No run can
// fail on load: a late poll only makes the bound looser.
func TestLeaseTakenOnlyAfterExpiry(t *testing.T) {
	for _, b := range backends {
		if !b.lease {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			const ttl = time.Second
			ctx := ctxTimeout(t, 30*time.Second)
			key := uniqueKey(t)
			db, px := b.proxiedDB(t)
			holder := b.client(t, db)
			mustObtain(t, ctx, holder, key, lock.WithTTL(ttl))
			px.SetBlackhole(true)
			defer px.Reset() // before the Clients close

			plain := b.openDB(t)
			q := "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires) FROM " + sqllock.DefaultLeaseTable + " WHERE name = ?"
			if b.dialect == sqllock.Postgres {
				q = "SELECT (EXTRACT(EPOCH FROM (expires - now())) * 1000000)::bigint FROM " + sqllock.DefaultLeaseTable + " WHERE name = $1"
			}
			sent := time.Now()
			var leftUS int64
			if err := plain.QueryRowContext(ctx, q, sqllock.DefaultPrefix+key).Scan(&leftUS); err != nil {
				t.Fatal(err)
			}
			expiry := sent.Add(time.Duration(leftUS) * time.Microsecond) // no later than the row's
			if leftUS <= 0 {
				t.Fatalf("the row expired %v before its holder's link was cut (renewals every TTL/3)", -time.Duration(leftUS)*time.Microsecond)
			}

			other := b.client(t, nil)
			polls := 0
			for {
				l, err := other.TryObtain(ctx, key, lock.WithTTL(ttl))
				answered := time.Now()
				polls++
				if err == nil {
					if answered.Before(expiry) {
						t.Fatalf("taken over %v before the row's expiry (%v left when read; poll %d)",
							expiry.Sub(answered).Round(time.Millisecond), (time.Duration(leftUS) * time.Microsecond).Round(time.Millisecond), polls)
					}
					l.Release(ctx)
					return
				}
				if !errors.Is(err, lock.ErrNotObtained) {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
