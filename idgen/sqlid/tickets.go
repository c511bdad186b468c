package sqlid

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Tickets is the dedicated "ID database" of Flickr's ticket servers: every
// Next is one row (MySQL/MariaDB) or one sequence value (PostgreSQL) in the
// database, so it is as fast as the database's round trips, the baseline
// the segment generators are measured against. It is safe for concurrent
// use.
//
// MySQL/MariaDB: the table tickets64 (WithTicketTable) holds one row,
// replaced on every call:
//
//	REPLACE INTO tickets64 (stub) VALUES ('a');
//	SELECT LAST_INSERT_ID();
//
// both on one connection (LAST_INSERT_ID is per connection), taken from the
// pool with db.Conn for the call. Two servers issue disjoint series when
// each runs with auto_increment_increment = 2 and its own
// auto_increment_offset (1 and 2): set them as global variables (the
// server's configuration, as Flickr did), or per connection with the DSN's
// system variables (go-sql-driver: ?auto_increment_increment=2&auto_increment_offset=1).
//
// PostgreSQL: the sequence tickets64 (WithTicketTable); Next is SELECT
// nextval('tickets64'). CreateSchema makes it with WithSequenceStep's
// increment and start, so two servers can issue disjoint series too.
type Tickets struct {
	turn  chan struct{} // holds a token while a MySQL Next runs: one at a time
	db    *sql.DB
	d     Dialect
	name  string
	inc   int64
	start int64
}

// TicketOption configures Tickets.
type TicketOption func(*Tickets)

// DefaultTicketTable is Flickr's table (and, for PostgreSQL, the sequence).
const DefaultTicketTable = "tickets64"

// WithTicketTable sets the table (MySQL) or sequence (PostgreSQL) name, an
// identifier optionally schema-qualified. Default: DefaultTicketTable.
func WithTicketTable(name string) TicketOption { return func(t *Tickets) { t.name = name } }

// WithSequenceStep sets, for PostgreSQL's CreateSchema, the sequence's
// increment and first value (server i of N: N, i+1). Default: 1, 1. MySQL
// takes these from the server's auto_increment_increment and
// auto_increment_offset instead.
func WithSequenceStep(increment, start int64) TicketOption {
	return func(t *Tickets) { t.inc, t.start = increment, start }
}

// NewTickets returns the ticket server in db. It does no I/O. It returns an
// error matching ErrInvalid for a nil db, an invalid dialect or name, or a
// sequence step that is not positive.
func NewTickets(db *sql.DB, d Dialect, opts ...TicketOption) (*Tickets, error) {
	t := &Tickets{db: db, d: d, name: DefaultTicketTable, inc: 1, start: 1, turn: make(chan struct{}, 1)}
	for _, opt := range opts {
		opt(t)
	}
	switch {
	case db == nil:
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrBadOption)
	case !d.Valid():
		return nil, fmt.Errorf("%w: %v", ErrBadOption, d)
	case !identRE.MatchString(t.name):
		return nil, fmt.Errorf("%w: ticket table name %q", ErrBadOption, t.name)
	case t.inc <= 0 || t.start <= 0:
		return nil, fmt.Errorf("%w: sequence increment %d, start %d", ErrBadStep, t.inc, t.start)
	}
	return t, nil
}

// maxTicketAttempts bounds the REPLACEs of one Next that InnoDB rolls back
// as deadlocks.
const maxTicketAttempts = 100

// ddl returns the statement that makes the table or sequence.
func (t *Tickets) ddl() string {
	if t.d == MySQL {
		return "CREATE TABLE IF NOT EXISTS " + t.name + ` (
  id   BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  stub CHAR(1) NOT NULL DEFAULT '',
  UNIQUE KEY stub (stub)
) ENGINE=InnoDB`
	}
	return fmt.Sprintf("CREATE SEQUENCE IF NOT EXISTS %s INCREMENT BY %d START WITH %d", t.name, t.inc, t.start)
}

// CreateSchema creates the table (MySQL) or the sequence (PostgreSQL)
// unless it exists.
func (t *Tickets) CreateSchema(ctx context.Context) error {
	if _, err := t.db.ExecContext(ctx, t.ddl()); err != nil {
		return fmt.Errorf("sqlid: create %s: %w", t.name, err)
	}
	return nil
}

// Next returns the next ticket: one REPLACE and one SELECT LAST_INSERT_ID()
// on one connection (MySQL), or one nextval (PostgreSQL). IDs are unique
// and, from one server, increasing in the order the database ran the
// statements. It returns ErrNoTable (wrapped, with the statement that makes
// it) when the table or sequence does not exist, ErrOverflow when it is
// exhausted, else the database's error.
func (t *Tickets) Next(ctx context.Context) (int64, error) {
	var id int64
	var err error
	if t.d == Postgres {
		err = t.db.QueryRowContext(ctx, "SELECT nextval('"+t.name+"')").Scan(&id)
	} else {
		// Concurrent REPLACEs of the one row deadlock in InnoDB (the delete
		// and the insert take their locks in different orders; measured
		// with 32 goroutines: most of them roll back, ~500 tickets/s). They
		// cannot run in parallel anyway, so this process sends one at a
		// time; REPLACEs of other processes can still deadlock with it, and
		// a statement rolled back as a deadlock is safe to take again.
		select {
		case t.turn <- struct{}{}:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		defer func() { <-t.turn }()
		for attempt := 1; ; attempt++ {
			id, err = t.nextMySQL(ctx)
			if err == nil || !isDeadlock(err) || attempt == maxTicketAttempts || ctx.Err() != nil {
				break
			}
		}
	}
	switch {
	case err == nil:
		return id, nil
	case isNoTable(err):
		return 0, fmt.Errorf("%w: %s (create it with Tickets.CreateSchema, or:\n%s): %v", ErrNoTable, t.name, t.ddl(), err)
	case isOutOfRange(err):
		return 0, fmt.Errorf("%w: %s: %v", ErrOverflow, t.name, err)
	}
	return 0, fmt.Errorf("sqlid: ticket from %s: %w", t.name, err)
}

func (t *Tickets) nextMySQL(ctx context.Context) (int64, error) {
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	res, err := conn.ExecContext(ctx, "REPLACE INTO "+t.name+" (stub) VALUES ('a')")
	if err != nil {
		return 0, err
	}
	// The OK packet of the REPLACE carries the insert ID already;
	// SELECT LAST_INSERT_ID() on the same connection is Flickr's recipe
	// and the check that both agree.
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&id); err != nil {
		return 0, err
	}
	if ins, err := res.LastInsertId(); err == nil && ins != id {
		return 0, errors.New("LAST_INSERT_ID() differs from the REPLACE's insert ID")
	}
	return id, nil
}
