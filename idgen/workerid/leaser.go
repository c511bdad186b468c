package workerid

import "context"

// Leaser leases the worker IDs of services: what RedisLeaser, ZKLeaser,
// SQLLeaser and the etcd module's etcdworker.Leaser all offer, so that a program picks its backend at start-up and
// uses the same code after. Its methods are safe for concurrent use.
type Leaser interface {
	// Lease takes the lowest free worker ID in [0, max] for service and
	// keeps it until the Lease is released or lost. It returns
	// *ExhaustedError when every ID is taken, and an error wrapping
	// ErrInvalid for a bad service name.
	Lease(ctx context.Context, service string) (*Lease, error)
	// List returns the current holders of service's worker IDs, lowest ID
	// first.
	List(ctx context.Context, service string) ([]Holder, error)
	// Close stops the leaser's background work and waits for it. Leases
	// already made are not affected: release them. It does not close the
	// Redis client, ZooKeeper connection or *sql.DB, and it is idempotent.
	Close() error
}

var (
	_ Leaser = (*RedisLeaser)(nil)
	_ Leaser = (*ZKLeaser)(nil)
	_ Leaser = (*SQLLeaser)(nil)
)
