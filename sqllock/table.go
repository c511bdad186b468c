package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/lock"
	"github.com/coordkit/coordkit/watchdog"
)

// leaseResult is the result of one acquiring statement of the lease table.
type leaseResult struct {
	token int64         // > 0: obtained
	left  time.Duration // PostgreSQL, when held by another: the holder's time left
	err   error
}

// leaseAcquire takes key's row, polling while another owner holds it.
func (c *Client) leaseAcquire(ctx context.Context, r *request) (*hold, error) {
	var timer *time.Timer
	retries, polls := 0, 0
	for {
		sent := c.o.now()
		res, given := c.leaseTry(ctx, r)
		if given {
			return nil, notObtainedCtx(ctx.Err())
		}
		switch {
		case errors.Is(res.err, ErrClosed):
			return nil, ErrClosed
		case res.err != nil && Retryable(res.err) && retries < maxRetries && ctx.Err() == nil:
			retries++ // a deadlock between upserts of one key (MySQL): try again
			continue
		case res.err != nil && errors.Is(res.err, context.DeadlineExceeded) && ctx.Err() == nil:
			// No answer within the TTL: a row the statement may have taken
			// expires by itself. Not obtained; Obtain tries again.
			if !r.block {
				return nil, errors.Join(lock.ErrNotObtained, fmt.Errorf("sqllock: obtain %q: no answer within the TTL: %w", r.key, res.err))
			}
		case res.err != nil:
			if ctx.Err() != nil {
				return nil, notObtainedCtx(ctx.Err())
			}
			return nil, fmt.Errorf("sqllock: obtain %q: %w", r.key, res.err)
		case res.token > 0 && c.o.now().Sub(sent) < r.o.TTL:
			return &hold{c: c, key: r.key, owner: r.owner, name: r.name, token: res.token, since: sent}, nil
		case res.token > 0:
			// The answer came after the row's TTL had run from the send
			// (a stalled link, a paused process): the row may have expired
			// and be taken by now. Give it back and try again.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			c.exec(cctx, c.db, c.lsq.release, r.name, res.token)
			cancel()
			if !r.block {
				return nil, lock.ErrNotObtained
			}
			continue
		case !r.block:
			return nil, lock.ErrNotObtained
		}
		polls++
		delay := c.o.poll(polls)
		if r.o.Retry != nil {
			delay = r.o.Retry(polls)
		} else if res.left > 0 {
			delay = min(delay, res.left)
		}
		if !sleep(ctx, &timer, delay) {
			return nil, notObtainedCtx(ctx.Err())
		}
	}
}

// leaseTry runs one acquiring statement on a ctx detached from ctx's
// cancellation (bounded by the TTL) in a goroutine of the Client's; when
// ctx ends first it returns given=true at once, and the goroutine gives
// back a row the statement took.
func (c *Client) leaseTry(ctx context.Context, r *request) (res leaseResult, given bool) {
	if !c.track() {
		return leaseResult{err: ErrClosed}, false
	}
	out := make(chan leaseResult)
	abandon := make(chan struct{})
	go func() { // owned by c (track): Close waits for it
		defer c.wg.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.TTL)
		res := c.leaseStmt(sctx, r)
		cancel()
		select {
		case out <- res:
		case <-abandon:
			if res.token > 0 {
				cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
				c.exec(cctx, c.db, c.lsq.release, r.name, res.token)
				cancel()
			}
		}
	}()
	select {
	case res := <-out:
		return res, false
	case <-ctx.Done():
		close(abandon)
		return leaseResult{}, true
	}
}

// leaseStmt is the acquiring statement: take the row if it is free or
// expired by the database's clock, with the next fencing token.
func (c *Client) leaseStmt(ctx context.Context, r *request) leaseResult {
	us := r.o.TTL.Microseconds()
	if c.d == MySQL {
		res, err := c.exec(ctx, c.db, c.lsq.acquire, r.name, r.owner, us)
		if err != nil {
			return leaseResult{err: err}
		}
		token, err := res.LastInsertId()
		return leaseResult{token: token, err: err}
	}
	var token, leftMS int64
	err := c.queryRow(ctx, c.db, c.lsq.acquire, r.name, r.owner, us).Scan(&token, &leftMS)
	if err != nil && !errors.Is(err, sql.ErrNoRows) { // no rows: the holder's row vanished meanwhile
		return leaseResult{err: err}
	}
	return leaseResult{token: token, left: time.Duration(leftMS) * time.Millisecond}
}

// leaseRenewal is a lease-table hold's watchdog renewal: the row's expiry
// moves to the database's now + TTL if the row still carries the hold's
// token.
func (c *Client) leaseRenewal(h *hold) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		// One attempt lasts at most a renewal interval: a database that
		// does not answer shows as failed renewals (logged, retried)
		// before the lease expires.
		ctx, cancel := context.WithTimeout(ctx, h.ttl/3)
		defer cancel()
		n, err := c.leaseUpdate(ctx, c.lsq.renew, h, true)
		switch {
		case err != nil:
			return fmt.Errorf("sqllock: renew %q: %w", h.key, err)
		case n == 0:
			return fmt.Errorf("%w: %w", lock.ErrNotHeld, watchdog.ErrNotHeld)
		}
		return nil
	}
}

// leaseRelease marks the hold's row free (it keeps its token, the next
// acquisition's floor).
func (c *Client) leaseRelease(ctx context.Context, h *hold) error {
	n, err := c.leaseUpdate(ctx, c.lsq.release, h, false)
	switch {
	case err != nil:
		return fmt.Errorf("sqllock: release %q: %w (the row expires after its TTL)", h.key, err)
	case n == 0:
		return lock.ErrNotHeld
	}
	return nil
}

// leaseUpdate runs renew (withTTL) or release on h's row and returns the
// number of rows that carry h's token. MySQL counts changed rows, not
// matched ones, unless the DSN sets clientFoundRows=true: an update that
// changed nothing is confirmed by a read.
func (c *Client) leaseUpdate(ctx context.Context, stmt string, h *hold, withTTL bool) (int64, error) {
	args := []any{h.name, h.token}
	if withTTL {
		args = append([]any{h.ttl.Microseconds()}, args...)
	}
	res, err := c.exec(ctx, c.db, stmt, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil || n > 0 || c.d != MySQL {
		return n, err
	}
	err = c.queryRow(ctx, c.db, c.lsq.confirm, h.name, h.token).Scan(&n)
	return n, err
}
