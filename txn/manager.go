package txn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/coordkit/coordkit/internal/sqldb"
	"github.com/coordkit/coordkit/sqllock"
)

// Mode is how a transaction type runs its branches.
type Mode string

const (
	// ModeSaga: ordered actions, compensated in reverse on a refusal.
	ModeSaga Mode = "saga"
	// ModeTCC: Try every branch, then Confirm all or Cancel all.
	ModeTCC Mode = "tcc"
)

// Op names what a branch func is asked to do. The barrier keys its rows by
// it.
type Op string

// The ops of Saga and TCC branches.
const (
	OpAction     Op = "action"
	OpCompensate Op = "compensate"
	OpTry        Op = "try"
	OpConfirm    Op = "confirm"
	OpCancel     Op = "cancel"
)

// forward reports whether op is a first-phase op, which may refuse with
// ErrAbort.
func (op Op) forward() bool { return op == OpAction || op == OpTry }

// origin returns the forward op that an undo op undoes ("" for others):
// the barrier's null-compensation and hanging rules pair them.
func (op Op) origin() Op {
	switch op {
	case OpCompensate:
		return OpAction
	case OpCancel:
		return OpTry
	}
	return ""
}

func (op Op) valid() bool {
	switch op {
	case OpAction, OpCompensate, OpTry, OpConfirm, OpCancel:
		return true
	}
	return false
}

// State is a global transaction's state in the log (see the package
// documentation's state machines).
type State string

// The states of a global transaction.
const (
	StateRunning     State = "running"      // Saga actions or TCC Trys under way
	StateConfirming  State = "confirming"   // TCC: every Try succeeded, Confirms under way
	StateRollingBack State = "rolling_back" // compensations or Cancels under way
	StateCommitted   State = "committed"    // final: every action (Saga) or Confirm (TCC) done
	StateAborted     State = "aborted"      // final: every started branch undone
	StateStuck       State = "stuck"        // a branch func still failed at the deadline
)

// Final reports whether no driver will act on a transaction in state s
// (stuck included: it waits for a person).
func (s State) Final() bool { return s == StateCommitted || s == StateAborted || s == StateStuck }

// The states of a branch in the log.
const (
	branchPending   = "pending"   // its forward func has not been called
	branchStarted   = "started"   // its forward func may have run (written before the call)
	branchDone      = "done"      // its forward func succeeded
	branchConfirmed = "confirmed" // TCC: its Confirm succeeded
	branchUndone    = "undone"    // its compensation or Cancel succeeded
)

// Branch is what a branch func is called with: the global transaction's
// gid, the branch's index (0-based, in registration order), the op asked
// for and the payload Run was given. A func that works behind an HTTP call
// sends these along; the barrier needs the first three.
type Branch struct {
	GID     int64
	ID      int
	Op      Op
	Payload []byte
}

// Func is a branch func. It may be called more than once for one op (a
// retry after an error, a recovery after a crash, a deposed driver still
// running), and a compensation or Cancel may be called for a branch whose
// forward func refused, failed or never ran, in which case it must do
// nothing: the Barrier gives both for a func that works in one local SQL
// transaction. A forward func (Saga action, TCC Try) returns an error
// wrapping ErrAbort to refuse; every other error is retried.
type Func func(ctx context.Context, b Branch) error

// SagaStep is one branch of a Saga: its action and the compensation that
// undoes it.
type SagaStep struct {
	Action, Compensate Func
}

// TCCBranch is one branch of a TCC transaction.
type TCCBranch struct {
	Try, Confirm, Cancel Func
}

// IDs hands out gids: *idgen.Snowflake implements it, IDFunc adapts a
// func. Every gid must be positive and never handed out twice (the log's
// primary key refuses a repeat).
type IDs interface {
	Next() (int64, error)
}

// IDFunc adapts a func() int64 to IDs.
type IDFunc func() int64

// Next returns f().
func (f IDFunc) Next() (int64, error) { return f(), nil }

// def is a registered transaction type.
type def struct {
	mode    Mode
	forward []Func // action or Try
	undo    []Func // compensation or Cancel
	confirm []Func // TCC only
	xa      []XABranch
}

// Manager runs global transactions and keeps their log in one database.
// Its methods are safe for concurrent use. Every process of a service
// builds one on the same log database and registers the same transaction
// types, so that any of them can recover the others' transactions.
type Manager struct {
	db    *sql.DB
	s     dialectSQL
	ids   IDs
	o     options
	owner string // this Manager's name in the log's owner column

	mu    sync.Mutex // protects types
	types map[string]def
}

// New returns a Manager whose log lives in db (dialect d: sqllock.MySQL for
// MySQL and MariaDB, sqllock.Postgres), taking gids from ids. It does no
// I/O; it returns an error wrapping ErrInvalid for a nil db or ids, an
// unknown dialect or a bad option. On MySQL the pool's sessions must have
// autocommit on (the default).
func New(db *sql.DB, d sqllock.Dialect, ids IDs, opts ...Option) (*Manager, error) {
	if db == nil {
		return nil, invalid("nil *sql.DB")
	}
	if !d.Valid() {
		return nil, invalid("unknown dialect %v", d)
	}
	if ids == nil {
		return nil, invalid("nil IDs")
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &Manager{
		db:    db,
		s:     dialectSQL{d: d, global: o.prefix + "global", branch: o.prefix + "branch"},
		ids:   ids,
		o:     o,
		owner: uuid.NewString(),
		types: map[string]def{},
	}, nil
}

// CreateTables creates the log's tables (and index) if they do not exist,
// with the DDL of the package documentation.
func (m *Manager) CreateTables(ctx context.Context) error {
	for _, stmt := range logDDL(m.s.d, m.s.global, m.s.branch) {
		if _, err := m.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("txn: creating the log's tables: %w", err)
		}
	}
	return nil
}

// RegisterSaga registers a Saga called name with its steps, in order. It
// returns an error wrapping ErrInvalid for a bad name, no steps, a nil
// func or a name already registered.
func (m *Manager) RegisterSaga(name string, steps ...SagaStep) error {
	d := def{mode: ModeSaga}
	for i, s := range steps {
		if s.Action == nil || s.Compensate == nil {
			return invalid("saga %q: step %d has a nil Action or Compensate", name, i)
		}
		d.forward = append(d.forward, s.Action)
		d.undo = append(d.undo, s.Compensate)
	}
	return m.register(name, d)
}

// RegisterTCC registers a TCC transaction called name with its branches.
// It returns an error wrapping ErrInvalid for a bad name, no branches, a
// nil func or a name already registered.
func (m *Manager) RegisterTCC(name string, branches ...TCCBranch) error {
	d := def{mode: ModeTCC}
	for i, b := range branches {
		if b.Try == nil || b.Confirm == nil || b.Cancel == nil {
			return invalid("tcc %q: branch %d has a nil Try, Confirm or Cancel", name, i)
		}
		d.forward = append(d.forward, b.Try)
		d.confirm = append(d.confirm, b.Confirm)
		d.undo = append(d.undo, b.Cancel)
	}
	return m.register(name, d)
}

func (m *Manager) register(name string, d def) error {
	if name == "" || len(name) > MaxNameLen {
		return invalid("transaction name %q: want 1 to %d bytes", name, MaxNameLen)
	}
	if len(d.forward) == 0 {
		return invalid("%s %q has no branches", d.mode, name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.types[name]; ok {
		return invalid("transaction %q registered twice", name)
	}
	m.types[name] = d
	return nil
}

func (m *Manager) lookup(name string) (def, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.types[name]
	return d, ok
}

// Run starts a global transaction of the registered type name with
// payload, logs it, and drives it to its end. The deadline is timeout from
// now: branch funcs that keep failing are retried until then, and a
// transaction with a func still failing at the deadline is marked stuck.
//
// Run returns the gid, and:
//   - nil: committed (every Saga action, or every TCC Confirm, succeeded);
//   - an error wrapping ErrAborted (and the refusing func's error): a
//     forward func refused and every started branch was undone;
//   - an error wrapping ErrStuck: the deadline passed; Stuck lists it;
//   - an error wrapping ErrDeposed: another driver took the transaction
//     over (this one's lease had expired), and drives it on;
//   - ctx's error, or an error writing to the log: the transaction is left
//     in the log where it stood, and Recover (in this process or another)
//     drives it to its end once this driver's lease expires;
//   - an error wrapping ErrInvalid (gid 0): nothing was logged.
func (m *Manager) Run(ctx context.Context, name string, payload []byte, timeout time.Duration) (int64, error) {
	d, ok := m.lookup(name)
	if !ok {
		return 0, invalid("no transaction type %q is registered", name)
	}
	if timeout <= 0 {
		return 0, invalid("timeout %v: want > 0", timeout)
	}
	if len(payload) > MaxPayload {
		return 0, invalid("payload of %d bytes: at most %d", len(payload), MaxPayload)
	}
	gid, err := m.ids.Next()
	if err != nil {
		return 0, fmt.Errorf("txn: taking a gid: %w", err)
	}
	if gid <= 0 {
		return 0, invalid("gid %d from IDs: want > 0", gid)
	}
	if payload == nil {
		payload = []byte{}
	}
	deadline := m.o.now().Add(timeout)
	if err := m.begin(ctx, gid, name, d, payload, timeout); err != nil {
		return gid, err
	}
	dr := &driver{m: m, gid: gid, token: 1, name: name, def: d, payload: payload,
		deadline: deadline, state: StateRunning, branches: make([]string, len(d.forward))}
	for i := range dr.branches {
		dr.branches[i] = branchPending
	}
	return gid, dr.drive(ctx)
}

// begin logs a new transaction, owned by m with token 1.
func (m *Manager) begin(ctx context.Context, gid int64, name string, d def, payload []byte, timeout time.Duration) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("txn: gid %d: logging the transaction: %w", gid, err)
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, m.s.q(`INSERT INTO {g} (gid, name, mode, state, phase, reason, payload, branches,
  deadline, owner, owner_token, lease_until, version, created, updated)
VALUES (?, ?, ?, ?, '', '', ?, ?, {now} + ?, ?, 1, {now} + ?, 1, {now}, {now})`),
		gid, name, string(d.mode), string(StateRunning), payload, len(d.forward),
		timeout.Microseconds(), m.owner, m.o.ttl.Microseconds())
	if sqldb.NoSuchTable(err) {
		return fmt.Errorf("%w: gid %d: logging the transaction in %s: %w (Manager.CreateTables makes the tables)", ErrSchema, gid, m.s.global, err)
	}
	if err != nil {
		return fmt.Errorf("txn: gid %d: logging the transaction: %w", gid, err)
	}
	for i := range d.forward {
		if _, err := tx.ExecContext(ctx, m.s.q("INSERT INTO {b} (gid, branch, state, last_error, updated) VALUES (?, ?, ?, '', {now})"),
			gid, i, branchPending); err != nil {
			return fmt.Errorf("txn: gid %d: logging branch %d: %w", gid, i, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("txn: gid %d: logging the transaction: %w", gid, err)
	}
	return nil
}

// Status is a global transaction as the log has it.
type Status struct {
	GID      int64
	Name     string
	Mode     Mode
	State    State
	Phase    State    // for a stuck transaction, the state it was stuck in
	Reason   string   // why it rolled back or is stuck; "" otherwise
	Branches []string // each branch's state: pending, started, done, confirmed, undone
	Token    int64    // the owner token of its latest driver
}

// Status returns the log's record of gid, or an error wrapping
// sql.ErrNoRows if it has none.
func (m *Manager) Status(ctx context.Context, gid int64) (Status, error) {
	st := Status{GID: gid}
	var mode, state, phase string
	err := m.db.QueryRowContext(ctx, m.s.q("SELECT name, mode, state, phase, reason, owner_token FROM {g} WHERE gid = ?"), gid).
		Scan(&st.Name, &mode, &state, &phase, &st.Reason, &st.Token)
	if err != nil {
		return st, fmt.Errorf("txn: reading gid %d: %w", gid, err)
	}
	st.Mode, st.State, st.Phase = Mode(mode), State(state), State(phase)
	rows, err := m.db.QueryContext(ctx, m.s.q("SELECT state FROM {b} WHERE gid = ? ORDER BY branch"), gid)
	if err != nil {
		return st, fmt.Errorf("txn: reading the branches of gid %d: %w", gid, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return st, fmt.Errorf("txn: reading the branches of gid %d: %w", gid, err)
		}
		st.Branches = append(st.Branches, s)
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("txn: reading the branches of gid %d: %w", gid, err)
	}
	return st, nil
}

// Stuck returns the transactions marked stuck (a branch func still failed
// at the deadline), oldest gid first, at most limit of them (limit <= 0:
// 1000). Each needs a person: its Reason names the branch, the op and the
// last error, its Phase the state it was in.
func (m *Manager) Stuck(ctx context.Context, limit int) ([]Status, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := m.db.QueryContext(ctx, m.s.q("SELECT gid FROM {g} WHERE state = ? ORDER BY gid LIMIT ?"), string(StateStuck), limit)
	if err != nil {
		return nil, fmt.Errorf("txn: listing stuck transactions: %w", err)
	}
	var gids []int64
	for rows.Next() {
		var gid int64
		if err := rows.Scan(&gid); err != nil {
			rows.Close()
			return nil, fmt.Errorf("txn: listing stuck transactions: %w", err)
		}
		gids = append(gids, gid)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("txn: listing stuck transactions: %w", err)
	}
	out := make([]Status, 0, len(gids))
	for _, gid := range gids {
		st, err := m.Status(ctx, gid)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// errNotClaimed: the transaction is final or its lease has not expired.
var errNotClaimed = errors.New("txn: not claimed")
