package sqllock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
)

func TestObtainRelease(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := b.client(t, nil)
		key := uniqueKey(t)
		l := mustObtain(t, ctx, c, key)
		if _, err := b.client(t, nil).TryObtain(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("TryObtain of a held key: %v", err)
		}
		first := l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("second Release: %v", err)
		}
		l2 := mustObtain(t, ctx, b.client(t, nil), key)
		if l2.Token() <= first {
			t.Fatalf("tokens %d then %d: not increasing", first, l2.Token())
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
