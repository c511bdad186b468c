//go:build chaosbroken

package main

import (
	"context"
	"errors"

	"github.com/coordkit/coordkit/lock"
)

// brokenBuild names what this build breaks, for the report.
const brokenBuild = "leases never report a loss (Lost never closes, Release hides ErrNotHeld); " +
	"the ids workload answers a clock step back with a fresh Snowflake on the same worker ID (no high-water mark, no lease)"

// brokenIDs makes the ids workload (ids.go) "recover" from
// *idgen.ClockBackwardsError the way a careless caller might: by building a
// new generator on its worker ID, which starts from the stepped-back clock
// and reissues the IDs of the ticks it went back over. The checker must
// flag the duplicates.
const brokenIDs = true

// wrapLocker, in the chaosbroken build only, wraps every backend so that it
// skips what the lock docs promise a holder: its lease never tells it of a
// loss. The checker must flag the overlaps this leaves unreported. The tag
// exists for the checker's own test ("does it find bugs?"); the library's
// build never sees it.
func wrapLocker(l lock.Locker) lock.Locker { return deafLocker{l} }

type deafLocker struct{ lock.Locker }

func (d deafLocker) Obtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	l, err := d.Locker.Obtain(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	return deafLease{Lease: l, never: make(chan struct{})}, nil
}

func (d deafLocker) TryObtain(ctx context.Context, key string, opts ...lock.Option) (lock.Lease, error) {
	l, err := d.Locker.TryObtain(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	return deafLease{Lease: l, never: make(chan struct{})}, nil
}

type deafLease struct {
	lock.Lease
	never chan struct{}
}

func (l deafLease) Lost() <-chan struct{} { return l.never }

func (l deafLease) Release(ctx context.Context) error {
	if err := l.Lease.Release(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		return err
	}
	return nil
}
