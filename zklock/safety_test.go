package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/lock"
)

// TestCancelledCreateAfterExpiry: right after a session expiry go-zookeeper
// has no session (ID 0) for a second before it dials again. An Obtain whose
// ctx ends then has queued its create, which go-zookeeper sends under the
// new session: the Client must delete that node, judged by its
// ephemeralOwner against the current session, or it blocks the key for the
// life of the new session.
func TestCancelledCreateAfterExpiry(t *testing.T) {
	key := "expired-create"
	conn := dial(t, server, time.Second)
	c := newClient(t, conn)
	oconn := dial(t, server, sessionTimeout)
	other := newClient(t, oconn)
	release(t, obtain(t, c, context.Background(), key)) // the parents exist

	if err := conn.Expire(); err != nil {
		t.Fatal(err)
	}
	sid := conn.SessionID()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := c.Obtain(ctx, key)
	cancel()
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Obtain without a session: %v, want ErrNotObtained", err)
	}
	t.Logf("session ID when Obtain started: %d", sid)
	// The new session is there; whatever the queued create made is deleted.
	deadline := time.Now().Add(10 * time.Second)
	for conn.State() != zk.StateHasSession || conn.SessionID() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no new session")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := other.Obtain(ctx, key)
	if err != nil {
		t.Fatalf("another client's Obtain after the cancelled one: %v (lock nodes %v)", err, children(t, oconn, key))
	}
	release(t, lease)
}
