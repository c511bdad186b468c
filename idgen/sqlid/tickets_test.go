package sqlid_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/coordkit/coordkit/idgen/sqlid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// newTickets returns a ticket server on db with a table or sequence of the
// test's own, created.
func newTickets(t testing.TB, b backend, opts ...sqlid.TicketOption) *sqlid.Tickets {
	t.Helper()
	tk, err := sqlid.NewTickets(b.openDB(t), b.dialect, append([]sqlid.TicketOption{sqlid.WithTicketTable(uniqueName(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.CreateSchema(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestTicketsConcurrent: 32 goroutines take tickets from one server: no
// duplicate, each goroutine's tickets increase, and the first is 1.
func TestTicketsConcurrent(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		tk := newTickets(t, b)
		if id, err := tk.Next(ctx); err != nil || id != 1 {
			t.Fatalf("first ticket %d, %v; want 1", id, err)
		}
		var mu sync.Mutex
		var all []int64
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				ids := draw(t, ctx, tk, 100)
				increasing(t, ids)
				mu.Lock()
				all = append(all, ids...)
				mu.Unlock()
			})
		}
		wg.Wait()
		noDuplicates(t, all)
		if all[len(all)-1] != 3201 {
			t.Fatalf("last ticket %d, want 3201 (no gaps from one server)", all[len(all)-1])
		}
	})
}

// TestTicketsTwoMariaDB: Flickr's pair of ticket servers, MariaDB with the
// global variables auto_increment_increment = 2 and auto_increment_offset
// 1 and 2 (set on the command line, as in Flickr's my.cnf): one hands out
// odd tickets, the other even ones, never the same.
func TestTicketsTwoMariaDB(t *testing.T) {
	ctx := ctxT(t)
	var servers []*sqlid.Tickets
	for _, offset := range []string{"1", "2"} {
		m := testserver.StartMariaDB(t, testserver.WithServerArgs("--auto-increment-increment=2", "--auto-increment-offset="+offset))
		tk, err := sqlid.NewTickets(openDB(t, "mysql", m.DSN()), sqlid.MySQL)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.CreateSchema(ctx); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, tk)
	}
	var mu sync.Mutex
	var all []int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				k := (w + i) % 2 // round robin over the two servers
				id, err := servers[k].Next(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if id%2 != int64(1-k) { // server 0: offset 1, odd
					t.Errorf("server %d handed out %d", k, id)
					return
				}
				mu.Lock()
				all = append(all, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	noDuplicates(t, all)
}

// TestTicketsPostgresSequences: two sequences made with increment 2 and
// starts 1 and 2 (as on two PostgreSQL servers) hand out disjoint tickets.
func TestTicketsPostgresSequences(t *testing.T) {
	ctx := ctxT(t)
	b := backends[1]
	odd := newTickets(t, b, sqlid.WithSequenceStep(2, 1))
	even := newTickets(t, b, sqlid.WithSequenceStep(2, 2))
	var all []int64
	for i := range 1000 {
		a, err := odd.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e, err := even.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a != int64(2*i+1) || e != int64(2*i+2) {
			t.Fatalf("tickets %d and %d, want %d and %d", a, e, 2*i+1, 2*i+2)
		}
		all = append(all, a, e)
	}
	noDuplicates(t, all)
}

// TestTicketsMissingTable: Next on a table or sequence that does not exist
// is ErrNoTable, naming it and how to create it.
func TestTicketsMissingTable(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		tk, err := sqlid.NewTickets(b.openDB(t), b.dialect, sqlid.WithTicketTable(name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tk.Next(ctxT(t))
		if !errors.Is(err, sqlid.ErrNoTable) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "CreateSchema") {
			t.Fatalf("Next on a missing table: %v", err)
		}
	})
}

// TestTicketsDatabaseKilled: a ticket server killed: Next fails (there is
// nothing in memory), then works again once the server is back, above
// every ticket handed out.
func TestTicketsDatabaseKilled(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		keepRunning(t, b.server())
		ctx := ctxT(t)
		tk := newTickets(t, b)
		ids := draw(t, ctx, tk, 100)
		b.server().Kill()
		if _, err := tk.Next(ctx); err == nil || errors.Is(err, sqlid.ErrInvalid) {
			t.Fatalf("Next with the server down: %v", err)
		}
		if err := b.server().Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "tickets again", func() bool {
			id, err := tk.Next(ctx)
			if err == nil {
				ids = append(ids, id)
			}
			return err == nil
		})
		increasing(t, ids)
	})
}
