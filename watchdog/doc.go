// Package watchdog keeps an expiring lease alive: one renewal loop used by
// every lease in coordkit that expires (the Redis lock, Redlock, Redis
// worker-ID leases).
//
// A lease implementation starts one Watchdog per lease and stops it at the
// release:
//
//	w, err := watchdog.Start(watchdog.Config{
//		TTL:   30 * time.Second,
//		Renew: func(ctx context.Context) error { return renew(ctx) }, // watchdog.ErrNotHeld when gone
//	})
//	if err != nil {
//		return err
//	}
//	defer w.Stop()
//	<-w.Lost() // closed once renewals fail for a TTL, or Renew answers ErrNotHeld
//
// Config's fields that matter: TTL (at least MinTTL), Interval (default TTL/3),
// MaxHold, OnLost, and Now, the injectable clock (default time.Now) that tests
// replace.
//
// # Guarantees
//
// The start time of a renewal attempt, not its end, counts as the moment the
// lease was extended, so the watchdog never believes a lease lives longer
// than the server does — as long as the clocks of this process and the
// server run at the same rate. A server whose clock jumps forward expires
// the lease early; the next renewal then reports ErrNotHeld.
//
// The Renew function receives a ctx that is cancelled when the lease is
// declared lost or the watchdog stops; clients that only honour ctx
// deadlines on I/O when configured to (go-redis' ContextTimeoutEnabled) may
// keep a renewal in flight until their own read timeout, which delays Stop
// but never the loss report.
//
// # Algorithm
//
// Start arms one loop that calls Config.Renew every Config.Interval (TTL/3
// by default), measured from the start of the previous attempt; its
// goroutine starts only when the first renewal is due, so a lease released
// sooner costs a timer and nothing else. A renewal that fails is retried
// sooner (every Interval/3) until it succeeds.
//
// The lease is lost, Lost() closes and Err() reports the cause, when:
//
//   - a renewal answers that the lease is no longer held (Renew returns an
//     error matching ErrNotHeld): lost at once;
//   - renewals keep failing (any other error, or no answer) until TTL has
//     passed since the start of the last successful renewal: lost then, even
//     while a renewal is still in flight, with an error matching ErrExpired
//     and wrapping the last renewal error;
//   - MaxHold has passed since Start: renewals stop and the lease is lost TTL
//     after the start of the last successful renewal (ErrMaxHold);
//   - the owner calls Lose.
//
// Stop ends the loop without reporting loss (the lease was released).
// Stop and Lose are idempotent and wait until the loop and any renewal in
// flight have returned: no goroutine outlives them.
package watchdog
