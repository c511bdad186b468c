package lock

import (
	"context"

	"github.com/google/uuid"
)

type ownerKey struct{}

// WithOwner returns a ctx that carries owner as the lock owner: Obtain with
// it re-enters locks the owner already holds. Use it to carry one owner
// across goroutines or services (e.g. in a request header). An empty owner
// is ignored.
func WithOwner(ctx context.Context, owner string) context.Context {
	if owner == "" {
		return ctx
	}
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFrom returns the owner carried by ctx, if any.
func OwnerFrom(ctx context.Context) (string, bool) {
	o, ok := ctx.Value(ownerKey{}).(string)
	return o, ok && o != ""
}

// NewOwner returns a new random owner ID (a UUIDv4 from crypto/rand).
func NewOwner() string { return uuid.NewString() }

// ensureOwner returns ctx with an owner, adding a new random one if needed.
func ensureOwner(ctx context.Context) context.Context {
	if _, ok := OwnerFrom(ctx); ok {
		return ctx
	}
	return WithOwner(ctx, NewOwner())
}
