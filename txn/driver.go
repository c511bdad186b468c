package txn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// driver drives one global transaction, as the owner of its log row with
// token; only its goroutine touches its fields.
type driver struct {
	m         *Manager
	gid       int64
	token     int64
	name      string
	def       def
	payload   []byte
	deadline  time.Time // local clock
	state     State
	reason    string
	branches  []string
	recovered bool  // claimed by Recover, not started by Run
	cause     error // the refusal that started the rollback, in this process
	// conns are XA branches' pinned connections (MySQL: prepared, until
	// phase two).
	conns map[int]*sql.Conn
}

// refusal is a forward func's ErrAbort.
type refusal struct {
	branch int
	op     Op
	err    error
}

func (r *refusal) Error() string {
	return fmt.Sprintf("branch %d %s refused: %v", r.branch, r.op, r.err)
}
func (r *refusal) Unwrap() error { return r.err }

// stuckError is a func still failing at the deadline.
type stuckError struct {
	branch int
	op     Op
	err    error
}

func (s *stuckError) Error() string {
	return fmt.Sprintf("branch %d %s still failing at the deadline: %v", s.branch, s.op, s.err)
}
func (s *stuckError) Unwrap() error { return s.err }

// drive runs the transaction from its current state to a final one, with
// a lease renewer that cancels the drive (cause ErrDeposed) if the lease
// is lost.
func (d *driver) drive(ctx context.Context) error {
	dctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := d.renew(dctx, cancel)
	var err error
	if d.def.mode == ModeXA {
		d.conns = map[int]*sql.Conn{}
		err = d.xaSteps(dctx)
		for _, c := range d.conns {
			// Left prepared (the driver stopped between the phases):
			// the server keeps it once the session ends, for Recover.
			closeConn(c, true)
		}
	} else {
		err = d.steps(dctx)
	}
	stop()
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrDeposed) || errors.Is(err, ErrAborted) || errors.Is(err, ErrStuck) {
		return err
	}
	if dctx.Err() != nil {
		if c := context.Cause(dctx); errors.Is(c, ErrDeposed) {
			return fmt.Errorf("txn: gid %d: %w", d.gid, c)
		}
		return fmt.Errorf("txn: gid %d left %s for Recover: %w", d.gid, d.state, context.Cause(dctx))
	}
	return fmt.Errorf("txn: gid %d left %s for Recover: %w", d.gid, d.state, err)
}

// renew starts the lease renewer: every TTL/3 it extends the lease, fenced
// by token; a refusal (another driver's token) or TTL without a successful
// renewal cancels ctx with ErrDeposed. stop ends it and waits for it.
func (d *driver) renew(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ttl := d.m.o.ttl
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, ttl/3)
			res, err := d.m.db.ExecContext(rctx, d.m.s.q(
				"UPDATE {g} SET lease_until = {now} + ?, version = version + 1 WHERE gid = ? AND owner_token = ?"),
				ttl.Microseconds(), d.gid, d.token)
			rcancel()
			if err == nil {
				var n int64
				if n, err = res.RowsAffected(); err == nil && n == 0 {
					cancel(fmt.Errorf("%w: token %d refused at renewal", ErrDeposed, d.token))
					return
				}
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				d.m.o.logger.Warn("txn: lease renewal failed", "gid", d.gid, "err", err)
				if time.Since(last) > ttl {
					cancel(fmt.Errorf("%w: lease not renewed for %v: %v", ErrDeposed, ttl, err))
					return
				}
				continue
			}
			last = time.Now()
		}
	}()
	return func() { close(done); wg.Wait() }
}

// write changes the transaction's state (state != "") and, for branch >= 0,
// that branch's state, in one local transaction fenced by the driver's
// token; it renews the lease. ErrDeposed if the token is no longer the
// row's.
func (d *driver) write(ctx context.Context, state State, reason string, branch int, bstate string) error {
	tx, err := d.m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("txn: gid %d: writing the log: %w", d.gid, err)
	}
	defer tx.Rollback()
	set, args := "", []any{d.m.o.ttl.Microseconds()}
	if state != "" {
		phase := ""
		if state == StateStuck {
			phase = string(d.state)
		}
		set = ", state = ?, phase = ?, reason = ?"
		args = append(args, string(state), phase, truncate(reason))
	}
	args = append(args, d.gid, d.token)
	res, err := tx.ExecContext(ctx, d.m.s.q("UPDATE {g} SET lease_until = {now} + ?, version = version + 1, updated = {now}"+set+
		" WHERE gid = ? AND owner_token = ?"), args...)
	if err != nil {
		return fmt.Errorf("txn: gid %d: writing the log: %w", d.gid, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("txn: gid %d: writing the log: %w", d.gid, err)
	} else if n == 0 {
		return fmt.Errorf("txn: gid %d: %w: token %d refused", d.gid, ErrDeposed, d.token)
	}
	if branch >= 0 {
		if _, err := tx.ExecContext(ctx, d.m.s.q("UPDATE {b} SET state = ?, updated = {now} WHERE gid = ? AND branch = ?"),
			bstate, d.gid, branch); err != nil {
			return fmt.Errorf("txn: gid %d: writing branch %d: %w", d.gid, branch, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("txn: gid %d: writing the log: %w", d.gid, err)
	}
	if state != "" {
		d.state, d.reason = state, reason
	}
	if branch >= 0 {
		d.branches[branch] = bstate
	}
	return nil
}

// setBranchError records a func's last error on its branch row (for the
// person reading the log); fenced like write.
func (d *driver) setBranchError(ctx context.Context, branch int, msg string) error {
	_, err := d.m.db.ExecContext(ctx, d.m.s.q(`UPDATE {b} SET last_error = ?, updated = {now}
WHERE gid = ? AND branch = ? AND EXISTS (SELECT 1 FROM {g} WHERE gid = ? AND owner_token = ?)`),
		truncate(msg), d.gid, branch, d.gid, d.token)
	if err != nil {
		return fmt.Errorf("txn: gid %d: writing branch %d: %w", d.gid, branch, err)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > maxReason {
		return s[:maxReason]
	}
	return s
}

// call calls f for branch i until it succeeds, refuses (a forward op
// returning ErrAbort: *refusal), the deadline passes (*stuckError) or ctx
// ends.
func (d *driver) call(ctx context.Context, i int, op Op, f Func) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt := 0; ; attempt++ {
		err := f(ctx, Branch{GID: d.gid, ID: i, Op: op, Payload: d.payload})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if op.forward() && errors.Is(err, ErrAbort) {
			return &refusal{branch: i, op: op, err: err}
		}
		wait := d.m.o.retry(attempt)
		if !d.m.o.now().Add(wait).Before(d.deadline) {
			return &stuckError{branch: i, op: op, err: err}
		}
		if attempt == 0 {
			if werr := d.setBranchError(ctx, i, fmt.Sprintf("%s: %v", op, err)); werr != nil && ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// steps drives the state machine.
func (d *driver) steps(ctx context.Context) error {
	if d.state == StateRunning && d.def.mode == ModeTCC && d.recovered {
		// The Try phase's driver is gone: nothing has been confirmed,
		// so cancelling is always allowed.
		if err := d.write(ctx, StateRollingBack, "recovered: the Try phase's driver was lost", -1, ""); err != nil {
			return err
		}
	}
	if d.state == StateRunning {
		for i, f := range d.def.forward {
			if d.branches[i] == branchDone {
				continue
			}
			op := OpAction
			if d.def.mode == ModeTCC {
				op = OpTry
			}
			if d.branches[i] == branchPending {
				if err := d.write(ctx, "", "", i, branchStarted); err != nil {
					return err
				}
			}
			err := d.call(ctx, i, op, f)
			var r *refusal
			var s *stuckError
			switch {
			case errors.As(err, &r):
				d.cause = r
				if err := d.write(ctx, StateRollingBack, r.Error(), -1, ""); err != nil {
					return err
				}
			case errors.As(err, &s):
				return d.stuck(ctx, s)
			case err != nil:
				return err
			default:
				if err := d.write(ctx, "", "", i, branchDone); err != nil {
					return err
				}
				continue
			}
			break
		}
		if d.state == StateRunning {
			next := StateCommitted
			if d.def.mode == ModeTCC {
				next = StateConfirming
			}
			if err := d.write(ctx, next, "", -1, ""); err != nil {
				return err
			}
		}
	}
	if d.state == StateConfirming {
		for i, f := range d.def.confirm {
			if d.branches[i] != branchDone {
				continue
			}
			err := d.call(ctx, i, OpConfirm, f)
			var s *stuckError
			if errors.As(err, &s) {
				return d.stuck(ctx, s)
			} else if err != nil {
				return err
			}
			if err := d.write(ctx, "", "", i, branchConfirmed); err != nil {
				return err
			}
		}
		if err := d.write(ctx, StateCommitted, "", -1, ""); err != nil {
			return err
		}
	}
	if d.state == StateRollingBack {
		op := OpCompensate
		if d.def.mode == ModeTCC {
			op = OpCancel
		}
		if err := d.undoAll(ctx, len(d.def.undo), op, func(i int) Func { return d.def.undo[i] }); err != nil {
			return err
		}
	}
	return d.result()
}

// undoAll undoes, in reverse order, every one of the n branches that
// started or finished (a compensation, a Cancel, an XA rollback: undo(i)),
// logging each as undone after it succeeded, and then the transaction as
// aborted. A branch still failing at the deadline makes it stuck.
func (d *driver) undoAll(ctx context.Context, n int, op Op, undo func(i int) Func) error {
	for i := n - 1; i >= 0; i-- {
		if b := d.branches[i]; b != branchStarted && b != branchDone {
			continue
		}
		err := d.call(ctx, i, op, undo(i))
		var s *stuckError
		if errors.As(err, &s) {
			return d.stuck(ctx, s)
		} else if err != nil {
			return err
		}
		if err := d.write(ctx, "", "", i, branchUndone); err != nil {
			return err
		}
	}
	return d.write(ctx, StateAborted, d.reason, -1, "")
}

// result is what the drive returns once the state is final.
func (d *driver) result() error {
	switch d.state {
	case StateCommitted:
		return nil
	case StateAborted:
		if d.cause != nil {
			return fmt.Errorf("%w: gid %d: %w", ErrAborted, d.gid, d.cause)
		}
		return fmt.Errorf("%w: gid %d: %s", ErrAborted, d.gid, d.reason)
	}
	return fmt.Errorf("txn: gid %d: unexpected state %q", d.gid, d.state)
}

// stuck marks the transaction stuck with s as the reason.
func (d *driver) stuck(ctx context.Context, s *stuckError) error {
	if err := d.write(ctx, StateStuck, s.Error(), -1, ""); err != nil {
		return err
	}
	return fmt.Errorf("%w: gid %d: %w", ErrStuck, d.gid, s)
}
