package watchdog_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/watchdog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a watchdog and stops it when the test ends.
func start(t *testing.T, cfg watchdog.Config) *watchdog.Watchdog {
	t.Helper()
	w, err := watchdog.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func waitLost(t *testing.T, w *watchdog.Watchdog, within time.Duration) time.Duration {
	t.Helper()
	begin := time.Now()
	select {
	case <-w.Lost():
		return time.Since(begin)
	case <-time.After(within):
		t.Fatalf("lease not lost within %v", within)
		return 0
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	renew := func(context.Context) error { return nil }
	tests := []struct {
		name string
		cfg  watchdog.Config
	}{
		{"nil renew", watchdog.Config{TTL: time.Second}},
		{"zero TTL", watchdog.Config{Renew: renew}},
		{"TTL below minimum", watchdog.Config{TTL: time.Millisecond, Renew: renew}},
		{"interval not below TTL", watchdog.Config{TTL: time.Second, Interval: time.Second, Renew: renew}},
		{"negative max hold", watchdog.Config{TTL: time.Second, Renew: renew, MaxHold: -1}},
		{"negative first TTL", watchdog.Config{TTL: time.Second, Renew: renew, FirstTTL: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if w, err := watchdog.Start(tt.cfg); err == nil {
				w.Stop()
				t.Fatal("Start accepted a bad config")
			}
		})
	}
}

func TestRenewsEveryThirdOfTTL(t *testing.T) {
	var n atomic.Int32
	// A TTL a loaded machine's stalls (a few hundred ms under -race beside
	// other work) do not outlast: at 90 ms a .ci/run saw the lease expire,
	// and 600 ms left 400 ms (load 23 on 2 cores); 1.5 s leaves 1 s.
	w := start(t, watchdog.Config{TTL: 1500 * time.Millisecond, Renew: func(context.Context) error {
		n.Add(1)
		return nil
	}})
	time.Sleep(2200 * time.Millisecond) // past the first TTL: held only by renewals
	select {
	case <-w.Lost():
		t.Fatalf("lost while renewals succeed: %v", w.Err())
	default:
	}
	// Due at 500, 1000, 1500 and 2000 ms; a loaded machine delays some,
	// and none comes early: 5 would mean an interval under 440 ms.
	if got := n.Load(); got < 2 || got > 4 {
		t.Fatalf("%d renewals in 2200 ms with a 500 ms interval", got)
	}
	if w.Err() != nil {
		t.Fatalf("Err = %v before any loss", w.Err())
	}
}

func TestNotHeldLosesAtOnce(t *testing.T) {
	w := start(t, watchdog.Config{TTL: 3 * time.Second, Interval: 20 * time.Millisecond,
		Renew: func(context.Context) error { return errors.Join(watchdog.ErrNotHeld, errors.New("gone")) }})
	// About one interval (20 ms); the bound leaves a starved host (load 23
	// on 2 cores) room and stays below the 3 s TTL.
	if d := waitLost(t, w, 5*time.Second); d > 2*time.Second {
		t.Fatalf("lost after %v, want about one interval", d)
	}
	if !errors.Is(w.Err(), watchdog.ErrNotHeld) {
		t.Fatalf("Err = %v, want ErrNotHeld", w.Err())
	}
}

func TestFailingRenewalsLoseAfterTTL(t *testing.T) {
	boom := errors.New("connection refused")
	var mu sync.Mutex
	failing := false
	// 1.5 s, renewed every 500 ms: with 600 ms, a renewal starved for
	// 400 ms (load 23 on 2 cores) would lose the lease while renewals succeed.
	w := start(t, watchdog.Config{TTL: 1500 * time.Millisecond, Renew: func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return boom
		}
		return nil
	}})
	time.Sleep(700 * time.Millisecond) // past the first renewal
	select {
	case <-w.Lost():
		t.Fatalf("lost while renewals succeed: %v", w.Err())
	default:
	}
	mu.Lock()
	failing = true
	mu.Unlock()
	began := time.Now()
	waitLost(t, w, 5*time.Second)
	if d := time.Since(began); d > 3500*time.Millisecond {
		t.Fatalf("lost %v after renewals started failing, TTL is 1.5 s", d)
	}
	if !errors.Is(w.Err(), watchdog.ErrExpired) || !errors.Is(w.Err(), boom) {
		t.Fatalf("Err = %v, want ErrExpired wrapping the renewal error", w.Err())
	}
}

func TestHangingRenewalLosesAtDeadline(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	w := start(t, watchdog.Config{TTL: 150 * time.Millisecond, Renew: func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			return nil
		}
		select { // a server that never answers, and a client that ignores ctx
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return errors.New("read timeout")
	}})
	t.Cleanup(func() { close(release) }) // runs before w.Stop
	// At the deadline (150 ms), not when the hanging call ends (5 s); 2.5 s
	// leaves a starved host (load 23 on 2 cores) room.
	if d := waitLost(t, w, 4*time.Second); d > 2500*time.Millisecond {
		t.Fatalf("lost after %v with a 150 ms TTL", d)
	}
	if !errors.Is(w.Err(), watchdog.ErrExpired) {
		t.Fatalf("Err = %v, want ErrExpired", w.Err())
	}
}

func TestMaxHoldStopsRenewals(t *testing.T) {
	var n atomic.Int32
	begin := time.Now()
	// TTL 3 s: with 600 ms, a test process stalled 600 ms or more within
	// the first second woke past the lease's deadline, and the loss was
	// ErrExpired (renewals that did not run), not ErrMaxHold.
	w := start(t, watchdog.Config{TTL: 3 * time.Second, MaxHold: time.Second,
		Renew: func(context.Context) error { n.Add(1); return nil }})
	waitLost(t, w, 8*time.Second)
	if d := time.Since(begin); d < time.Second {
		t.Fatalf("lost after %v, before MaxHold", d)
	}
	if !errors.Is(w.Err(), watchdog.ErrMaxHold) {
		t.Fatalf("Err = %v, want ErrMaxHold", w.Err())
	}
	before := n.Load()
	time.Sleep(100 * time.Millisecond)
	if n.Load() != before {
		t.Fatal("renewals continued after the loss")
	}
}

func TestInjectedClock(t *testing.T) {
	// The clock decides expiry: a clock that runs ahead of wall time makes the
	// lease expire while the server keeps answering with errors.
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	w := start(t, watchdog.Config{TTL: 10 * time.Second, Interval: 10 * time.Millisecond, Now: now,
		Renew: func(context.Context) error { return errors.New("unavailable") }})
	time.Sleep(50 * time.Millisecond)
	select {
	case <-w.Lost():
		t.Fatal("lost before the TTL")
	default:
	}
	offset.Store(int64(11 * time.Second))
	waitLost(t, w, 2*time.Second)
	if !errors.Is(w.Err(), watchdog.ErrExpired) {
		t.Fatalf("Err = %v, want ErrExpired", w.Err())
	}
}

func TestStopAndLose(t *testing.T) {
	t.Run("stop is idempotent and does not report loss", func(t *testing.T) {
		w := start(t, watchdog.Config{TTL: time.Second, Renew: func(context.Context) error { return nil }})
		w.Stop()
		w.Stop()
		select {
		case <-w.Lost():
			t.Fatal("Stop closed Lost")
		default:
		}
		if w.Err() != nil {
			t.Fatalf("Err = %v after Stop", w.Err())
		}
	})
	t.Run("lose reports the cause", func(t *testing.T) {
		cause := errors.New("client closed")
		w := start(t, watchdog.Config{TTL: time.Second, Renew: func(context.Context) error { return nil }})
		w.Lose(cause)
		w.Lose(errors.New("second cause ignored"))
		waitLost(t, w, time.Second)
		if !errors.Is(w.Err(), cause) {
			t.Fatalf("Err = %v, want %v", w.Err(), cause)
		}
	})
	t.Run("stop cancels a renewal in flight and waits for it", func(t *testing.T) {
		entered := make(chan struct{})
		var returned atomic.Bool
		w := start(t, watchdog.Config{TTL: time.Second, Interval: 10 * time.Millisecond,
			Renew: func(ctx context.Context) error {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-ctx.Done()
				returned.Store(true)
				return ctx.Err()
			}})
		<-entered
		w.Stop()
		if !returned.Load() {
			t.Fatal("Stop returned before the renewal in flight")
		}
	})
}

func TestRenewedHook(t *testing.T) {
	var ok, failed atomic.Int32
	var calls atomic.Int32
	w := start(t, watchdog.Config{TTL: 300 * time.Millisecond,
		Renew: func(context.Context) error {
			if calls.Add(1)%2 == 0 {
				return errors.New("flaky")
			}
			return nil
		},
		OnRenew: func(err error) {
			if err != nil {
				failed.Add(1)
			} else {
				ok.Add(1)
			}
		}})
	time.Sleep(time.Second)
	w.Stop()
	if ok.Load() == 0 || failed.Load() == 0 {
		t.Fatalf("hook saw %d successes and %d failures", ok.Load(), failed.Load())
	}
}

// TestFirstTTL: a lease granted for less than its TTL is renewed within a
// third of that first TTL, then on the usual schedule; if that first
// renewal fails, the lease is lost when the first TTL runs out.
func TestFirstTTL(t *testing.T) {
	t.Run("renewed early", func(t *testing.T) {
		var mu sync.Mutex
		var at []time.Duration
		begin := time.Now()
		// A first TTL of 1.5 s: with 150 ms, a renewal starved for
		// 100 ms (load 23 on 2 cores) would lose the lease. The TTL is 6 s so
		// that the usual schedule (every 2 s) stays told apart.
		w := start(t, watchdog.Config{TTL: 6 * time.Second, FirstTTL: 1500 * time.Millisecond, LastRenewed: begin,
			Renew: func(context.Context) error {
				mu.Lock()
				at = append(at, time.Since(begin))
				mu.Unlock()
				return nil
			}})
		time.Sleep(1800 * time.Millisecond) // past the first TTL
		select {
		case <-w.Lost():
			t.Fatalf("lost: %v", w.Err())
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		// First at 500 ms (1500/3), next at 2.5 s (TTL/3 later): one
		// renewal so far, within the first TTL (not at 2 s).
		if len(at) != 1 || at[0] < 450*time.Millisecond || at[0] >= 1500*time.Millisecond {
			t.Fatalf("renewals at %v, want one at about 500 ms", at)
		}
	})
	t.Run("lost at the first TTL", func(t *testing.T) {
		begin := time.Now()
		w := start(t, watchdog.Config{TTL: 3 * time.Second, FirstTTL: 150 * time.Millisecond, LastRenewed: begin,
			Renew: func(context.Context) error { return errors.New("unreachable") }})
		waitLost(t, w, 5*time.Second)
		// About 150 ms; at most 2 s on a starved host (load 23 on 2
		// cores), below the TTL's 3 s.
		if d := time.Since(begin); d < 150*time.Millisecond || d > 2*time.Second {
			t.Fatalf("lost after %v, want about 150 ms", d)
		}
		if !errors.Is(w.Err(), watchdog.ErrExpired) {
			t.Fatalf("cause %v, want ErrExpired", w.Err())
		}
	})
}

// TestHeld: Held turns false when the deadline (last renewal sent + TTL)
// passes by Config.Now, without the watchdog's goroutine having run: the
// clock here jumps past it (a process resumed after a stop) while Lost is
// still open; a renewal moves it on.
func TestHeld(t *testing.T) {
	var off atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(off.Load())) }
	renewed := make(chan struct{}, 10)
	w, err := watchdog.Start(watchdog.Config{
		TTL: time.Hour, Now: now,
		Renew: func(context.Context) error { renewed <- struct{}{}; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if !w.Held() || w.Overdue() {
		t.Fatal("Held false or Overdue at the start")
	}
	off.Store(int64(59 * time.Minute))
	if !w.Held() || w.Overdue() {
		t.Fatal("Held false or Overdue before the deadline")
	}
	off.Store(int64(61 * time.Minute))
	if w.Held() {
		t.Fatal("Held true past the deadline")
	}
	if !w.Overdue() {
		t.Fatal("Overdue false past the deadline, Lost still open")
	}
	select {
	case <-w.Lost():
		t.Fatal("Lost closed: the loop ran (its timer fires after 20 min of real time)")
	default:
	}
	w.Lose(errors.New("done"))
	if w.Overdue() {
		t.Fatal("Overdue true after Lose: the loss is reported")
	}
	off.Store(0)
	if w.Held() {
		t.Fatal("Held true after Lose")
	}
}

// TestHeldAfterRenewal: a successful renewal moves Held's deadline to its
// send time plus the TTL.
func TestHeldAfterRenewal(t *testing.T) {
	var off atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(off.Load())) }
	renewed := make(chan struct{}, 100)
	w, err := watchdog.Start(watchdog.Config{
		TTL: 1500 * time.Millisecond, Now: now, // 300 ms left a starved host 250 ms (load 23 on 2 cores)
		Renew: func(context.Context) error {
			select {
			case renewed <- struct{}{}:
			default:
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for range 3 { // renewed every 500 ms
		<-renewed
	}
	time.Sleep(50 * time.Millisecond)
	if !w.Held() {
		t.Fatal("Held false after renewals, 1.55 s after the start (the first deadline was 1.5 s)")
	}
}
