package workerid_test

import (
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen/workerid"
	"github.com/coordkit/coordkit/internal/testserver"
)

// TestLeaserClose: through the Leaser interface, every backend leases and
// lists the same way, and Close (idempotent) leaves the leases already made
// held until they are released.
func TestLeaserClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) workerid.Leaser
	}{
		{"redis", func(t *testing.T) workerid.Leaser { return newRedisLeaser(t, testserver.StartRedis(t)) }},
		{"zk", func(t *testing.T) workerid.Leaser { l, _ := zkLeaser(t); return l }},
		{"mariadb", func(t *testing.T) workerid.Leaser { s := sqlDBs()[0]; return s.leaser(t, s.newTable(t)) }},
		{"postgres", func(t *testing.T) workerid.Leaser { s := sqlDBs()[1]; return s.leaser(t, s.newTable(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			l := tc.open(t)
			lease, err := l.Lease(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			release(t, lease)
			holders, err := l.List(ctx, "svc")
			if err != nil || len(holders) != 1 || holders[0].ID != lease.ID() {
				t.Fatalf("List: %+v, %v; want worker %d", holders, err, lease.ID())
			}
			for range 2 {
				if err := l.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
			select {
			case <-lease.Lost():
				t.Fatalf("lease lost after the leaser's Close: %v", lease.Err())
			case <-time.After(100 * time.Millisecond):
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("Release after Close: %v", err)
			}
		})
	}
}
