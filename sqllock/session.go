package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/watchdog"
)

// outcome is the result of one acquiring statement of a session lock.
type outcome struct {
	token int64
	ok    bool // the lock is held, with token
	// wait: the previous hold's session ended without a release and its
	// row has not expired; the hold may start wait after the answer.
	wait time.Duration
	err  error // the statement failed
	// dirty: the connection may hold the lock although ok is false (the
	// statement failed after taking it): unlock before reusing it.
	dirty bool
}

// sessionAcquire pins a connection and takes the session lock on it.
func (c *Client) sessionAcquire(ctx context.Context, r *request) (*hold, error) {
	conn, err := c.db.Conn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, notObtainedCtx(ctx.Err())
		}
		return nil, fmt.Errorf("sqllock: obtain %q: %w", r.key, err)
	}
	var timer *time.Timer
	retries := 0
	for attempt := 1; ; attempt++ {
		slice := c.o.slice
		if !r.block || r.o.Retry != nil {
			slice = 0 // one try
		}
		if conn == nil { // the last one was closed, not clean
			if conn, err = c.repin(ctx, r); err != nil {
				return nil, err
			}
		}
		sent := c.o.now()
		out, given := c.sessionTry(ctx, conn, r, slice)
		if given { // ctx ended; the statement and the connection went on without us
			return nil, notObtainedCtx(ctx.Err())
		}
		if !out.ok && out.dirty {
			// The statement ended (a timeout, a cancel, an error) after it
			// may have been granted the lock: waiting for the fencing row
			// behind a slow transaction, for instance. Session locks are
			// re-entrant: unlock until the session holds nothing, or close
			// the connection, before anything else runs on it.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			if !c.unlockConn(cctx, conn, r.id) {
				conn = nil
			}
			cancel()
		}
		if out.ok && c.o.now().Sub(sent) >= r.o.TTL {
			// The answer came after the TTL had run since the send (a
			// stalled link, a paused process): the lease would be lost on
			// arrival, its row's expiry already past. Give it back and,
			// for Obtain, try again.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			if !c.giveBack(cctx, conn, r, out.token) {
				conn = nil
			}
			cancel()
			if !r.block {
				closeConn(conn)
				return nil, lock.ErrNotObtained
			}
			continue
		}
		switch {
		case out.ok && out.wait > 0:
			// The previous holder's session ended without a release (its
			// process died, its connection was cut or killed, the server
			// restarted): it may still believe it holds the lock until its
			// row expires. Wait for that; TryObtain does not.
			if r.block && sleep(ctx, &timer, out.wait) {
				h, err := c.handOut(ctx, r, conn, out.token, sent.Add(out.wait))
				if err == nil {
					return h, nil
				}
				conn = nil // discarded: its session ended, and the lock with it
				if ctx.Err() != nil {
					return nil, notObtainedCtx(ctx.Err())
				}
				continue
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			if c.giveBack(cctx, conn, r, out.token) {
				conn.Close()
			}
			cancel()
			if !r.block {
				return nil, lock.ErrNotObtained
			}
			return nil, notObtainedCtx(ctx.Err())
		case out.ok:
			h, err := c.handOut(ctx, r, conn, out.token, sent)
			if err == nil {
				return h, nil
			}
			conn = nil // discarded: its session ended, and the lock with it
			if !r.block || ctx.Err() != nil {
				return nil, notObtainedCtx(ctx.Err())
			}
			continue
		case errors.Is(out.err, ErrClosed):
			closeConn(conn)
			return nil, ErrClosed
		case out.err != nil:
			// conn, if not nil, holds nothing (unlocked above). No answer
			// within the statement's bound (slice + TTL): not obtained; a
			// lock it may have taken went with its connection, which the
			// driver closed. Obtain tries again.
			timedOut := errors.Is(out.err, context.DeadlineExceeded) && ctx.Err() == nil
			if ctx.Err() == nil && (Retryable(out.err) && retries < maxRetries || timedOut && r.block) {
				if !timedOut {
					retries++
				}
				continue
			}
			closeConn(conn)
			switch {
			case ctx.Err() != nil:
				return nil, notObtainedCtx(ctx.Err())
			case timedOut:
				return nil, errors.Join(lock.ErrNotObtained, fmt.Errorf("sqllock: obtain %q: no answer within the TTL: %w", r.key, out.err))
			}
			return nil, fmt.Errorf("sqllock: obtain %q: %w", r.key, out.err)
		case !r.block:
			closeConn(conn)
			return nil, lock.ErrNotObtained
		}
		if r.o.Retry != nil && !sleep(ctx, &timer, r.o.Retry(attempt)) {
			closeConn(conn)
			return nil, notObtainedCtx(ctx.Err())
		}
		if ctx.Err() != nil {
			closeConn(conn)
			return nil, notObtainedCtx(ctx.Err())
		}
	}
}

// closeConn returns conn, which holds no session lock, to the pool; nil
// (closed already) is fine.
func closeConn(conn *sql.Conn) {
	if conn != nil {
		conn.Close()
	}
}

// repin takes another connection from the pool for r, after the last one
// was closed.
func (c *Client) repin(ctx context.Context, r *request) (*sql.Conn, error) {
	conn, err := c.db.Conn(ctx)
	switch {
	case err == nil:
		return conn, nil
	case ctx.Err() != nil:
		return nil, notObtainedCtx(ctx.Err())
	}
	return nil, fmt.Errorf("sqllock: obtain %q: %w", r.key, err)
}

// handOut returns the hold of the session lock conn was granted with
// token, its lease counted from since (the acquiring statement's send, or
// the end of the wait for a previous holder's row). A lease with more than
// TTL/3 of it gone (granted late in a wait in the server, or answered
// late) has its first check due already: handOut runs it before handing
// the lease out, not the watchdog with what is left as its deadline (a
// check cut by that deadline makes the driver close the connection, which
// ends the session: a release made in time then answered "not held"; the
// chaos sql runs, a 3 ms section granted 994 ms after its send). The check
// may take until the lease's deadline, detached from ctx's cancellation
// like the watchdog's, and the lease then counts from its send. If it
// fails, conn is discarded (its session ends, and the lock with it) and
// the error returned.
func (c *Client) handOut(ctx context.Context, r *request, conn *sql.Conn, token int64, since time.Time) (*hold, error) {
	h := c.newSessionHold(r, conn, token, since)
	now := c.o.now()
	if now.Sub(since) <= r.o.TTL/3 {
		return h, nil
	}
	h.ttl = r.o.TTL
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), since.Add(r.o.TTL).Sub(now))
	err := c.sessionCheck(h)(cctx)
	cancel()
	if err != nil {
		discard(conn)
		return nil, err
	}
	h.since = now
	return h, nil
}

func (c *Client) newSessionHold(r *request, conn *sql.Conn, token int64, since time.Time) *hold {
	return &hold{c: c, key: r.key, owner: r.owner, name: r.name, id: r.id, token: token, since: since, conn: conn}
}

// sessionTry runs one acquiring statement on conn, waiting up to slice in
// the database (0: one try). The statement runs on a ctx detached from
// ctx's cancellation, bounded by slice + TTL, in a goroutine of the
// Client's: cancelling a statement makes the drivers close its connection,
// and a lock wait cut short that way can still be granted in the server
// after the client left. When ctx ends first, sessionTry returns
// given=true at once and the goroutine keeps conn: it gives back whatever
// the statement took and returns the connection to the pool (or closes it).
func (c *Client) sessionTry(ctx context.Context, conn *sql.Conn, r *request, slice time.Duration) (out outcome, given bool) {
	if !c.track() {
		return outcome{err: ErrClosed}, false
	}
	res := make(chan outcome)
	abandon := make(chan struct{})
	if c.d == MySQL { // GET_LOCK waits whole seconds
		slice = time.Duration(math.Ceil(slice.Seconds())) * time.Second
	}
	go func() { // owned by c (track): Close waits for it
		defer c.wg.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), slice+r.o.TTL)
		out := c.sessionStmt(sctx, conn, r, slice)
		cancel()
		select {
		case res <- out:
			return
		case <-abandon:
		}
		cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		switch {
		case out.ok:
			if c.giveBack(cctx, conn, r, out.token) {
				conn.Close()
			}
		case out.dirty:
			if c.unlockConn(cctx, conn, r.id) {
				conn.Close()
			}
		default:
			conn.Close()
		}
	}()
	select {
	case out := <-res:
		return out, false
	case <-ctx.Done():
		close(abandon)
		return outcome{}, true
	}
}

// sessionStmt runs the acquiring statement: the lock, the fencing
// counter's increment and the row's expiry in one round trip.
func (c *Client) sessionStmt(ctx context.Context, conn *sql.Conn, r *request, slice time.Duration) outcome {
	ttl := r.o.TTL.Microseconds()
	if c.d == MySQL {
		// GET_LOCK's timeout: whole seconds for MySQL (MariaDB takes
		// fractions), 0 for one try.
		secs := int64(slice / time.Second)
		res, err := c.exec(ctx, conn, c.ses.acquire, r.name, r.owner, ttl, r.id, secs, ttl)
		if err != nil {
			return outcome{err: err, dirty: true}
		}
		id, err := res.LastInsertId()
		switch {
		case err != nil:
			return outcome{err: err, dirty: true}
		case id > 0:
			return outcome{token: id, ok: true}
		case id == 0:
			return outcome{}
		}
		var token, waitUS int64
		if err := c.queryRow(ctx, conn, c.ses.grace, ttl, r.name).Scan(&token, &waitUS); err != nil {
			return outcome{err: err, dirty: true}
		}
		return outcome{token: token, ok: true, wait: max(time.Duration(waitUS)*time.Microsecond, 0)}
	}
	var token, waitUS int64
	var err error
	if slice == 0 {
		err = c.queryRow(ctx, conn, c.ses.try, r.id, r.name, r.owner, ttl).Scan(&token, &waitUS)
	} else {
		timeout := strconv.FormatInt(max(slice.Milliseconds(), 1), 10) + "ms"
		err = c.queryRow(ctx, conn, c.ses.acquire, r.id, r.name, r.owner, ttl, timeout).Scan(&token, &waitUS)
	}
	switch {
	case err == nil:
		return outcome{token: token, ok: true, wait: max(time.Duration(waitUS)*time.Microsecond, 0)}
	case errors.Is(err, sql.ErrNoRows): // pg_try_advisory_lock said no
		return outcome{}
	case pgWaitEnded(err) && ctx.Err() == nil:
		// lock_timeout ended the slice. (The timeout may have hit a wait
		// after the advisory lock was granted: dirty.)
		return outcome{dirty: true}
	}
	return outcome{err: err, dirty: true}
}

// maxUnlocks bounds the levels of one session lock unlockConn frees before
// it closes the connection instead. A connection of the Client holds a
// lock once at most; more is a bug, which closing the connection cures.
const maxUnlocks = 4

// unlockConn frees the session lock id on conn until conn holds it no more
// (session locks are re-entrant: once per grant), and reports whether conn
// is clean and usable again; if not, conn was closed (discarded: its
// session ends, freeing whatever it held). Every path that ends an
// acquiring statement which may have been granted the lock, without handing
// the lock out, runs it (or closes the connection).
func (c *Client) unlockConn(ctx context.Context, conn *sql.Conn, id any) bool {
	for range maxUnlocks {
		var freed sql.NullBool
		if err := c.queryRow(ctx, conn, c.ses.unlock, id).Scan(&freed); err != nil {
			c.obs.Debug("unlocking a session lock failed; closing its connection", "lock", id, "err", err)
			discard(conn)
			return false
		}
		if !freed.Valid || !freed.Bool {
			return true
		}
	}
	c.obs.Debug("a connection held a session lock more than once; closing it", "lock", id)
	discard(conn)
	return false
}

// giveBack frees a lock conn obtained for r but that was not handed out,
// taking back the TTL its acquisition added to the row's expiry (and
// keeping what was left of a previous hold's), and reports whether conn is
// usable again; if not, it was closed.
func (c *Client) giveBack(ctx context.Context, conn *sql.Conn, r *request, token int64) bool {
	ttl := r.o.TTL.Microseconds()
	args := []any{ttl, r.name, token, r.id}
	if c.d == Postgres {
		args = []any{r.id, r.name, token, ttl}
	}
	ok, err := c.sessionWrite(ctx, conn, c.ses.undo, args)
	if ok {
		// It freed one level; make sure there is no other before the
		// connection can go back to the pool.
		return c.unlockConn(ctx, conn, r.id)
	}
	c.obs.Debug("giving back a session lock failed; closing its connection", "key", r.key, "token", token, "err", err)
	discard(conn)
	return false
}

// sessionRelease frees the hold's lock, marks its row released, and returns
// its connection to the pool; a release the database does not confirm
// closes the connection, which frees the lock with its session.
func (c *Client) sessionRelease(ctx context.Context, h *hold, conn *sql.Conn) error {
	if conn == nil { // closed by Close
		return lock.ErrNotHeld
	}
	args := []any{h.name, h.token, h.id}
	if c.d == Postgres {
		args = []any{h.id, h.name, h.token}
	}
	ok, err := c.sessionWrite(ctx, conn, c.ses.release, args)
	switch {
	case err != nil && connBroken(ctx, conn, err):
		// The session had ended (its connection broken: killed, cut, or
		// closed by the driver when a check ran past the lease's
		// deadline), and the lock with it: the hold is lost, not
		// released.
		discard(conn)
		cause := fmt.Errorf("%w: %w: the session ended before its release: %w", ErrSessionLost, lock.ErrNotHeld, err)
		h.wd.Lose(cause)
		return fmt.Errorf("sqllock: release %q: %w", h.key, cause)
	case err != nil:
		discard(conn)
		return fmt.Errorf("sqllock: release %q: %w (its connection was closed, which frees the lock)", h.key, err)
	case !ok:
		discard(conn)
		return lock.ErrNotHeld
	}
	conn.Close() // back to the pool, holding nothing
	return nil
}

// sessionCheck is a session lock's watchdog renewal: in one statement it
// proves that the pinned connection still holds the lock (IS_USED_LOCK(name)
// = CONNECTION_ID(); a granted advisory lock of the backend's pid in
// pg_locks) and moves the row's expiry to the database's now + TTL. A
// broken connection, or one that does not hold the lock, loses the lease
// at once.
func (c *Client) sessionCheck(h *hold) func(ctx context.Context) error {
	conn := h.conn // the connection cannot change while the watchdog runs
	ttl := h.ttl.Microseconds()
	args := []any{ttl, h.name, h.token, h.id}
	if c.d == Postgres {
		args = []any{h.id, h.name, h.token, ttl}
	}
	return func(wctx context.Context) error {
		// The watchdog cancels a check in flight when the lease is
		// released (Stop) or the Client closes, and a statement cancelled
		// in flight makes the driver close its connection, which ends the
		// session and frees the lock: the release that follows would fail
		// on a lease that was never lost. So the check ignores the
		// cancellation and keeps only the deadline (the lease's own, set
		// by the watchdog), within which Stop waits for it.
		ctx := context.WithoutCancel(wctx)
		if dl, ok := wctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, dl)
			defer cancel()
		}
		ok, err := c.sessionWrite(ctx, conn, c.ses.check, args)
		if err == nil && !ok && c.d == MySQL { // nothing changed within a microsecond?
			var n int64
			err = c.queryRow(ctx, conn, c.ses.confirm, h.name, h.token, h.id).Scan(&n)
			ok = n > 0
		}
		switch {
		case err != nil && connBroken(ctx, conn, err):
			return fmt.Errorf("%w: %w: %w: %w", ErrSessionLost, lock.ErrNotHeld, watchdog.ErrNotHeld, err)
		case err != nil:
			return fmt.Errorf("sqllock: check %q: %w", h.key, err)
		case !ok:
			return fmt.Errorf("%w: %w: %w: the connection no longer holds the lock", ErrSessionLost, lock.ErrNotHeld, watchdog.ErrNotHeld)
		}
		return nil
	}
}

// sessionWrite runs a write of a session lock on conn (release, undo,
// check) and reports whether it applied to the hold's row: one row changed
// (MySQL), or a true answer (PostgreSQL's statements end in RETURNING or
// SELECT a boolean).
func (c *Client) sessionWrite(ctx context.Context, conn *sql.Conn, stmt string, args []any) (bool, error) {
	if c.d == MySQL {
		res, err := c.exec(ctx, conn, stmt, args...)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return n == 1, err
	}
	var ok sql.NullBool
	err := c.queryRow(ctx, conn, stmt, args...).Scan(&ok)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return ok.Valid && ok.Bool, err
}
