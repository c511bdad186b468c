package contract_test

import (
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/contract"
	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/zklock"
)

// TestRW runs the read-write lock's checks (contract.RunRW) against Redis
// (lock.RW) and ZooKeeper; the etcd module's tests run them against
// etcdlock.Client.
func TestRW(t *testing.T) {
	for _, b := range []contract.RWBackend{
		{Name: "lock.RW", Open: func(t *testing.T) lock.RWLocker {
			rdb := single.NewClient()
			rw := lock.NewRW(rdb)
			t.Cleanup(func() { rw.Close(); rdb.Close() })
			return rw
		}},
		{Name: "zklock.Client", Open: func(t *testing.T) lock.RWLocker {
			conn := zkSrv.DialT(t, 4*time.Second, nil)
			c, err := zklock.New(conn.Conn, zklock.WithRoot("/contract-rw"), zklock.WithSessionTimeout(4*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}},
	} {
		t.Run(b.Name, func(t *testing.T) { contract.RunRW(t, b) })
	}
}
