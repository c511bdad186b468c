package etcdlock_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordkit/coordkit/etcd/etcdlock"
	"github.com/coordkit/coordkit/internal/contract"
)

// TestContract runs the checks every coordkit Locker passes
// (internal/contract) against etcdlock.Client. A hold is taken away by
// revoking the holder's lease, as an operator's etcdctl lease revoke does.
func TestContract(t *testing.T) {
	contract.Run(t, contract.Backend{
		Name: "etcdlock.Client",
		Open: func(t *testing.T) contract.Closer {
			c, err := etcdlock.New(dial(t, server.Endpoints()...), etcdlock.WithPrefix("/contract"), etcdlock.WithTTL(ttl), withTestLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		},
		// lock.WithTTL's bad values are refused (ErrInvalidTTL); good ones
		// do not apply (the lease's TTL is the Client's).
		Reentrant: true, TTL: true, Reason: etcdlock.ErrLeaseLost,
		Lose: func(t *testing.T, c contract.Closer, key string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			info, err := c.(*etcdlock.Client).Inspect(ctx, key)
			if err != nil || !info.Held() {
				t.Fatalf("Inspect %q: %+v, %v", key, info, err)
			}
			if _, err := dial(t, server.Endpoints()...).Revoke(ctx, clientv3.LeaseID(info.Holder.Lease)); err != nil {
				t.Fatal(err)
			}
		},
	})
}
