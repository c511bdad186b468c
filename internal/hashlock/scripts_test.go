package hashlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/internal/hashlock"
	"github.com/coordkit/coordkit/lock"
)

// TestScriptsLoad: every script of the engine loads on a real server under
// the SHA that EVALSHA sends.
func TestScriptsLoad(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := shared.Client(t)
	for name, s := range hashlock.Scripts() {
		t.Run(name, func(t *testing.T) {
			sha, err := s.Eval().Load(ctx, rdb).Result()
			if err != nil {
				t.Fatalf("SCRIPT LOAD: %v", err)
			}
			if sha != s.Hash() {
				t.Fatalf("sha %s, want %s", sha, s.Hash())
			}
		})
	}
}

// TestAgreesWithLock: the engine's defaults and sentinel are package
// lock's, so that a zero Node and a default Client see the same locks and
// the engine's errors match lock.ErrInvalid.
func TestAgreesWithLock(t *testing.T) {
	if hashlock.DefaultPrefix != lock.DefaultPrefix {
		t.Errorf("DefaultPrefix %q, lock's %q", hashlock.DefaultPrefix, lock.DefaultPrefix)
	}
	if hashlock.DefaultWaiterTimeout != lock.DefaultWaiterTimeout {
		t.Errorf("DefaultWaiterTimeout %v, lock's %v", hashlock.DefaultWaiterTimeout, lock.DefaultWaiterTimeout)
	}
	if hashlock.DefaultReleaseWindow != lock.DefaultReleaseWindow {
		t.Errorf("DefaultReleaseWindow %v, lock's %v", hashlock.DefaultReleaseWindow, lock.DefaultReleaseWindow)
	}
	if hashlock.ErrInvalid != lock.ErrInvalid { // the same value, not a wrap
		t.Errorf("ErrInvalid is not lock.ErrInvalid")
	}
	for _, key := range []string{"", "}x"} {
		if err := hashlock.CheckKey(key); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("CheckKey(%q): %v, want lock.ErrInvalid", key, err)
		}
	}
	if err := hashlock.CheckKey("a{b}c"); err != nil {
		t.Errorf("CheckKey(a{b}c): %v", err)
	}
}
