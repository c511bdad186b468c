package txn

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Recover drives to their end the unfinished transactions (running,
// confirming or rolling back) whose driver's lease has expired: their
// driver died, was cancelled, or is paused or cut off from the log. For
// each, it takes the lease with the next owner token (in one local
// transaction that locks the row, so one driver at a time wins), then goes
// on from the state the log has: a Saga that was running goes forward, a
// TCC transaction that was in its Try phase is cancelled, one confirming
// or rolling back finishes that. A deposed driver still running is refused
// its next write to the log; its branch funcs may still run meanwhile,
// which the Barrier makes harmless.
//
// It then finishes the in-doubt XA branches of the registered XA types'
// resource databases (see the package documentation's XA section).
//
// Recover handles at most limit transactions (limit <= 0: 100), one after
// another, and returns how many it drove to a final state (committed,
// aborted or stuck). A transaction it could not finish (a type this
// Manager has not registered, the log unreachable, ctx ended) is left for
// a later call, and its error joined into the one returned; a transaction
// another driver claimed first is skipped. Run it periodically in one
// process at a time (under election, for instance): concurrent calls are
// safe, only wasteful.
func (m *Manager) Recover(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := m.db.QueryContext(ctx, m.s.q(`SELECT gid FROM {g}
WHERE state IN (?, ?, ?) AND lease_until < {now} ORDER BY gid LIMIT ?`),
		string(StateRunning), string(StateConfirming), string(StateRollingBack), limit)
	if err != nil {
		return 0, fmt.Errorf("txn: listing transactions to recover: %w", err)
	}
	var gids []int64
	for rows.Next() {
		var gid int64
		if err := rows.Scan(&gid); err != nil {
			rows.Close()
			return 0, fmt.Errorf("txn: listing transactions to recover: %w", err)
		}
		gids = append(gids, gid)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("txn: listing transactions to recover: %w", err)
	}
	n := 0
	var errs []error
	for _, gid := range gids {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		d, err := m.claim(ctx, gid)
		if errors.Is(err, errNotClaimed) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		err = d.drive(ctx)
		if err == nil || errors.Is(err, ErrAborted) || errors.Is(err, ErrStuck) {
			n++
			continue
		}
		if !errors.Is(err, ErrDeposed) {
			m.o.logger.Warn("txn: recovery left a transaction unfinished", "gid", gid, "err", err)
			errs = append(errs, err)
		}
	}
	if _, err := m.resolveInDoubt(ctx); err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// claim takes the lease of gid with the next owner token if it is
// unfinished and its lease expired (else errNotClaimed), and returns its
// driver.
func (m *Manager) claim(ctx context.Context, gid int64) (*driver, error) {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("txn: gid %d: claiming: %w", gid, err)
	}
	defer tx.Rollback()
	var name, mode, state, reason string
	var payload []byte
	var branches int
	var token, left, lease int64
	err = tx.QueryRowContext(ctx, m.s.q(`SELECT name, mode, state, reason, payload, branches, owner_token,
  deadline - {now}, lease_until - {now} FROM {g} WHERE gid = ? FOR UPDATE`), gid).
		Scan(&name, &mode, &state, &reason, &payload, &branches, &token, &left, &lease)
	if err != nil {
		return nil, fmt.Errorf("txn: gid %d: claiming: %w", gid, err)
	}
	if State(state).Final() || lease >= 0 {
		return nil, errNotClaimed
	}
	d, ok := m.lookup(name)
	if !ok {
		return nil, fmt.Errorf("txn: gid %d: recovering: %w", gid, invalid("no transaction type %q is registered", name))
	}
	if string(d.mode) != mode || len(d.forward) != branches {
		return nil, fmt.Errorf("txn: gid %d: recovering: %w", gid,
			invalid("transaction type %q is registered as a %s of %d branches, the log has a %s of %d", name, d.mode, len(d.forward), mode, branches))
	}
	if _, err := tx.ExecContext(ctx, m.s.q(`UPDATE {g} SET owner = ?, owner_token = owner_token + 1,
  lease_until = {now} + ?, version = version + 1, updated = {now} WHERE gid = ?`),
		m.owner, m.o.ttl.Microseconds(), gid); err != nil {
		return nil, fmt.Errorf("txn: gid %d: claiming: %w", gid, err)
	}
	dr := &driver{m: m, gid: gid, token: token + 1, name: name, def: d, payload: payload,
		deadline: m.o.now().Add(time.Duration(left) * time.Microsecond), state: State(state),
		branches: make([]string, branches), recovered: true}
	rows, err := tx.QueryContext(ctx, m.s.q("SELECT branch, state FROM {b} WHERE gid = ? ORDER BY branch"), gid)
	if err != nil {
		return nil, fmt.Errorf("txn: gid %d: claiming: %w", gid, err)
	}
	for rows.Next() {
		var i int
		var s string
		if err := rows.Scan(&i, &s); err != nil {
			rows.Close()
			return nil, fmt.Errorf("txn: gid %d: claiming: %w", gid, err)
		}
		if i < 0 || i >= branches {
			rows.Close()
			return nil, fmt.Errorf("txn: gid %d: the log has branch %d of %d", gid, i, branches)
		}
		dr.branches[i] = s
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("txn: gid %d: claiming: %w", gid, err)
	}
	dr.reason = reason
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("txn: gid %d: claiming: %w", gid, err)
	}
	return dr, nil
}

// RecoverLoop calls Recover every interval until ctx ends, then returns
// nil. A pass's error is logged (WithLogger) and the next pass tries
// again. Run it in one process at a time, under package election:
//
//	err := e.Run(ctx, func(ctx context.Context, _ *election.Term) error {
//		return m.RecoverLoop(ctx, 5*time.Second) // ends when the term does
//	})
//
// A term lost in the middle of a recovery cancels it: the transaction it
// was driving stays under its lease until that expires, and the next
// leader takes it over. An interval <= 0 is an error wrapping ErrInvalid.
func (m *Manager) RecoverLoop(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return invalid("recovery interval %v: want > 0", interval)
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if n, err := m.Recover(ctx, 0); err != nil && ctx.Err() == nil {
			m.o.logger.Warn("txn: recovery pass", "finished", n, "err", err)
		} else if n > 0 {
			m.o.logger.Info("txn: recovery pass", "finished", n)
		}
		t.Reset(interval)
	}
}
