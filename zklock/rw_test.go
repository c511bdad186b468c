package zklock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/zklock"
)

func TestReadWrite(t *testing.T) {
	key := "rw"
	conn := dial(t, server, sessionTimeout)
	var cs []*zklock.Client
	for range 3 {
		cs = append(cs, newClient(t, dial(t, server, sessionTimeout)))
	}
	bg := context.Background()

	// Readers share.
	r1 := obtain(t, cs[0].Read(), bg, key)
	r2 := obtain(t, cs[1].Read(), bg, key)
	r3, err := cs[2].Read().TryObtain(bg, key)
	if err != nil {
		t.Fatalf("third reader: %v", err)
	}
	release(t, r3)
	// Writers wait for them.
	for _, l := range []lock.Locker{cs[2].Write(), cs[2]} {
		if _, err := l.TryObtain(bg, key); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("writer's TryObtain under readers: %v, want ErrNotObtained", err)
		}
	}
	writer := obtainAsync(bg, cs[2].Write(), key)
	waitChildren(t, conn, key, 3)
	// A reader arriving after a waiting writer queues behind it (FIFO).
	late := obtainAsync(bg, cs[0].Read(), key)
	waitChildren(t, conn, key, 4)

	release(t, r1)
	time.Sleep(100 * time.Millisecond)
	select {
	case r := <-writer:
		t.Fatalf("writer obtained while a reader holds: %v", r.err)
	default:
	}
	release(t, r2)
	w := await(t, writer, 10*time.Second).lease
	if _, err := cs[1].Read().TryObtain(bg, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("reader's TryObtain under a writer: %v, want ErrNotObtained", err)
	}
	select {
	case r := <-late:
		t.Fatalf("late reader obtained while the writer holds: %v", r.err)
	default:
	}
	release(t, w)
	release(t, await(t, late, 10*time.Second).lease)
	waitChildren(t, conn, key, 0)
}

func TestReadWriteOwner(t *testing.T) {
	key := "rw-owner"
	conn := dial(t, server, sessionTimeout)
	c := newClient(t, conn)
	other := newClient(t, dial(t, server, sessionTimeout))
	alice := lock.WithOwner(context.Background(), "alice")
	bob := lock.WithOwner(context.Background(), "bob")

	// A writer may also read (downgrade); the exclusive side re-enters.
	w := obtain(t, c.Write(), alice, key)
	r := obtain(t, c.Read(), alice, key)
	m := obtain(t, c, alice, key) // the mutex is the write side
	if m.Token() != w.Token() {
		t.Fatalf("re-entered token %d, want %d", m.Token(), w.Token())
	}
	if _, err := other.Read().TryObtain(bob, key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("bob reads under alice's write lock: %v", err)
	}
	release(t, m)
	release(t, w)
	// alice now only reads: bob may read too, alice may not upgrade.
	rb := obtain(t, other.Read(), bob, key)
	if _, err := c.Write().Obtain(alice, key); !errors.Is(err, zklock.ErrUpgrade) {
		t.Fatalf("upgrade: %v, want ErrUpgrade", err)
	}
	release(t, r)
	release(t, rb)
	waitChildren(t, conn, key, 0)
}

// TestReadWriteExclusion mixes readers and writers on one key: a writer is
// never inside with anyone else.
func TestReadWriteExclusion(t *testing.T) {
	key := "rw-mix"
	var cs []*zklock.Client
	for range 2 {
		cs = append(cs, newClient(t, dial(t, server, sessionTimeout)))
	}
	var readers, writers, bad, sharedSeen atomic.Int32
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[g%2]
			for range 5 {
				var err error
				if g%4 == 0 {
					err = lock.Do(context.Background(), c.Write(), key, func(context.Context) error {
						if writers.Add(1) != 1 || readers.Load() != 0 {
							bad.Add(1)
						}
						time.Sleep(time.Millisecond)
						writers.Add(-1)
						return nil
					})
				} else {
					err = lock.Do(context.Background(), c.Read(), key, func(context.Context) error {
						if n := readers.Add(1); n > 1 {
							sharedSeen.Add(1)
						}
						if writers.Load() != 0 {
							bad.Add(1)
						}
						time.Sleep(2 * time.Millisecond)
						readers.Add(-1)
						return nil
					})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d sections overlapped a writer", n)
	}
	t.Logf("readers overlapped %d times", sharedSeen.Load())
}

// TestReadWhileWriterQueued: alice holds the write side and bob queues for
// it; alice's read is granted at once (Curator's semantics), and bob still
// waits until alice has released both sides.
func TestReadWhileWriterQueued(t *testing.T) {
	key := "rw-downgrade"
	conn := dial(t, server, sessionTimeout)
	c := newClient(t, conn)
	other := newClient(t, dial(t, server, sessionTimeout))
	alice := lock.WithOwner(context.Background(), "alice")
	bob := lock.WithOwner(context.Background(), "bob")

	w := obtain(t, c.Write(), alice, key)
	writer := obtainAsync(bob, other.Write(), key)
	waitChildren(t, conn, key, 2)

	ctx, cancel := context.WithTimeout(alice, 5*time.Second)
	defer cancel()
	r, err := c.Read().Obtain(ctx, key)
	if err != nil {
		t.Fatalf("write holder's read with a writer queued: %v", err)
	}
	if _, err := other.Read().TryObtain(context.Background(), key); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("another reader under alice's locks: %v, want ErrNotObtained", err)
	}
	release(t, w)
	time.Sleep(200 * time.Millisecond)
	select {
	case res := <-writer:
		t.Fatalf("bob obtained the write lock while alice reads: %v", res.err)
	default:
	}
	release(t, r)
	release(t, await(t, writer, 10*time.Second).lease)
	waitChildren(t, conn, key, 0)
}
