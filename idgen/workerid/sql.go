package workerid

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coordkit/coordkit/idgen"
	"github.com/coordkit/coordkit/internal/observe"
	"github.com/coordkit/coordkit/internal/sqldb"
	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/watchdog"
)

// DefaultTable is the table of a SQLLeaser unless WithTable says otherwise.
const DefaultTable = "coordkit_worker_node"

// maxServiceLen is the longest service name a SQLLeaser accepts, in bytes
// (the service column's width).
const maxServiceLen = 128

// claimAttempts bounds the attempts of one claim statement that fail with
// a deadlock or a lock wait timeout of the database (sqllock.Retryable).
const claimAttempts = 5

// SQLLeaser leases worker IDs through a table in MySQL, MariaDB or
// PostgreSQL: a row per (service, worker ID) with its holder, an expiry on
// the database's clock that the watchdog renews, and the ID's high-water
// mark (see the package documentation for the schema). It holds no
// connection between statements. It is safe for concurrent use.
type SQLLeaser struct {
	db   *sql.DB
	d    sqllock.Dialect
	opts options
	obs  *observe.IDs
	q    sqlQueries
}

// NewSQL returns a leaser over db, a pool of a MySQL, MariaDB or
// PostgreSQL database whose table WithTable names (default DefaultTable)
// holds the worker rows; CreateSchema creates it. The dialect is detected
// from db's driver unless WithDialect sets it. NewSQL does no I/O; it
// returns an error wrapping ErrInvalid for a nil db, bad options, or a
// driver whose dialect it cannot tell without WithDialect. The leaser does
// not close db.
func NewSQL(db *sql.DB, opts ...Option) (*SQLLeaser, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalid)
	}
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	d := o.dialect
	if d == 0 {
		switch kind, typ := sqldb.DriverKind(db); kind {
		case sqldb.KindMySQL:
			d = sqllock.MySQL
		case sqldb.KindPostgres:
			d = sqllock.Postgres
		default:
			return nil, fmt.Errorf("%w: cannot tell the SQL dialect of driver %s: set WithDialect", ErrInvalid, typ)
		}
	}
	return &SQLLeaser{
		db: db, d: d, opts: o,
		obs: observe.NewIDs("coordkit/workerid", o.logger, o.metrics),
		q:   newSQLQueries(d, o.table),
	}, nil
}

// Dialect returns the SQL the leaser speaks.
func (s *SQLLeaser) Dialect() sqllock.Dialect { return s.d }

// Table returns the leaser's table.
func (s *SQLLeaser) Table() string { return s.opts.table }

// Schema returns the CREATE TABLE statement of the leaser's table, as
// CreateSchema runs it.
func (s *SQLLeaser) Schema() string { return s.q.ddl }

// CreateSchema creates the leaser's table if it does not exist (CREATE
// TABLE IF NOT EXISTS, see Schema). An existing table is left as it is.
func (s *SQLLeaser) CreateSchema(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, s.q.ddl); err != nil {
		return fmt.Errorf("workerid: create table %s: %w", s.opts.table, err)
	}
	return nil
}

// Close does nothing and returns nil: a SQLLeaser has no background work of
// its own (each Lease's watchdog belongs to the Lease, and Release stops
// it). It does not close the *sql.DB.
func (s *SQLLeaser) Close() error { return nil }

// dbErr wraps an error of the database: a missing table or column is
// ErrSchema, with the statement that creates the table.
func (s *SQLLeaser) dbErr(what string, err error) error {
	if sqldb.NoSuchTable(err) {
		return fmt.Errorf("%w: %s: table %s is missing or lacks a column (%v); create it with SQLLeaser.CreateSchema, or:\n%s",
			ErrSchema, what, s.opts.table, err, s.q.ddl)
	}
	return fmt.Errorf("workerid: %s: %w", what, err)
}

func (s *SQLLeaser) checkService(service string) error {
	if err := checkService(service); err != nil {
		return err
	}
	if len(service) > maxServiceLen {
		return fmt.Errorf("%w: service name of %d bytes, longer than %d", ErrInvalid, len(service), maxServiceLen)
	}
	return nil
}

// Lease takes the lowest free worker ID in [0, max] for service: it reads
// which IDs are held (one SELECT of the rows whose expiry is ahead on the
// database's clock) and claims the lowest other one with one conditional
// upsert (a transaction of its own): the row is inserted, or taken over if
// it is free or expired; if another process claimed it first, the next
// free ID is tried. The watchdog renews the row every TTL/3. It returns
// *ExhaustedError when every ID is held, an error wrapping ErrInvalid for a
// bad service name, ErrSchema when the table is missing, and the database's
// errors wrapped. A claim cut short (ctx ended, the connection broke) may
// still have taken its row, which then stays taken until its TTL runs out.
func (s *SQLLeaser) Lease(ctx context.Context, service string) (*Lease, error) {
	if err := s.checkService(service); err != nil {
		return nil, err
	}
	owner, err := idgen.NewUUIDv4()
	if err != nil {
		return nil, fmt.Errorf("workerid: owner id: %w", err)
	}
	held, err := s.heldIDs(ctx, service)
	if err != nil {
		return nil, err
	}
	ttl := s.opts.ttl
	next := 0 // index into held of the lowest held ID not below id
	for id := int64(0); id <= s.opts.max; id++ {
		for next < len(held) && held[next] < id {
			next++
		}
		if next < len(held) && held[next] == id {
			continue
		}
		sent := time.Now() // before the statement: the database's expiry starts later
		ok, err := s.claim(ctx, service, id, owner.String(), ttl)
		if err != nil {
			return nil, err
		}
		if ok {
			return s.keep(service, id, owner.String(), sent)
		}
	}
	return nil, &ExhaustedError{Service: service, Max: s.opts.max}
}

// heldIDs returns the IDs in [0, max] of service whose rows have not
// expired, in ascending order.
func (s *SQLLeaser) heldIDs(ctx context.Context, service string) ([]int64, error) {
	rows, err := s.db.QueryContext(ctx, s.q.held, service, s.opts.max)
	if err != nil {
		return nil, s.dbErr(fmt.Sprintf("read the worker rows of %q", service), err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, s.dbErr(fmt.Sprintf("read the worker rows of %q", service), err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr(fmt.Sprintf("read the worker rows of %q", service), err)
	}
	return ids, nil
}

// claim runs the claim statement on one ID and reports whether the row is
// now owner's, retrying a deadlock or lock wait timeout.
func (s *SQLLeaser) claim(ctx context.Context, service string, id int64, owner string, ttl time.Duration) (bool, error) {
	what := fmt.Sprintf("lease %q/%d", service, id)
	for attempt := 1; ; attempt++ {
		ok, err := s.claimOnce(ctx, service, id, owner, ttl)
		if err == nil {
			return ok, nil
		}
		if !sqllock.Retryable(err) || attempt == claimAttempts || ctx.Err() != nil {
			return false, s.dbErr(what, err)
		}
		t := time.NewTimer(time.Duration(attempt) * 5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, s.dbErr(what, errors.Join(err, ctx.Err()))
		case <-t.C:
		}
	}
}

func (s *SQLLeaser) claimOnce(ctx context.Context, service string, id int64, owner string, ttl time.Duration) (bool, error) {
	args := []any{service, id, owner, s.opts.host, int64(os.Getpid()), ttl.Microseconds()}
	if s.d == sqllock.MySQL {
		// The statement's insert ID is 1 when the row was inserted or
		// taken over, 0 when another holder's row was left alone: reliable
		// whatever clientFoundRows says, unlike the rows affected.
		res, err := s.db.ExecContext(ctx, s.q.claim, args...)
		if err != nil {
			return false, err
		}
		n, err := res.LastInsertId()
		return n == 1, err
	}
	var got int64
	err := s.db.QueryRowContext(ctx, s.q.claim, args...).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// keep starts the watchdog of a freshly claimed ID. The local deadline is
// 90 % of the TTL from the moment the claim was sent, so that generators
// stop before the row expires on the database's clock (which started the
// TTL later, when it ran the statement) and another process can take the
// ID, with a margin for clock-rate drift and scheduling delay.
func (s *SQLLeaser) keep(service string, id int64, owner string, sent time.Time) (*Lease, error) {
	ttl := s.opts.ttl
	wd, err := watchdog.Start(watchdog.Config{
		Observer:    &leaseEvents{obs: s.obs, service: service, id: id},
		TTL:         ttl - ttl/10,
		Interval:    ttl / 3,
		LastRenewed: sent,
		Renew: func(ctx context.Context) error {
			return s.renew(ctx, service, id, owner, ttl)
		},
	})
	if err != nil {
		// Only a bad configuration fails here; give the ID back.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.free(ctx, service, id, owner)
		return nil, err
	}
	return &Lease{
		service:    service,
		id:         id,
		max:        s.opts.max,
		lost:       wd.Lost(),
		held:       wd.Held,
		cause:      wd.Err,
		hw:         &sqlHighWater{s: s, service: service, id: id},
		checkpoint: s.opts.checkpoint,
		free: func(ctx context.Context) error {
			wd.Lose(ErrReleased) // generators stop before the row is freed
			return s.free(ctx, service, id, owner)
		},
	}, nil
}

// renew extends the row by ttl from the database's now if it is still
// owner's and has not expired; otherwise the lease is not held.
func (s *SQLLeaser) renew(ctx context.Context, service string, id int64, owner string, ttl time.Duration) error {
	res, err := s.db.ExecContext(ctx, s.q.renew, ttl.Microseconds(), service, id, owner)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 && s.d == sqllock.MySQL {
		// MySQL counts changed rows: a renewal in the same microsecond as
		// the last one changes nothing. Look.
		if err := s.db.QueryRowContext(ctx, s.q.confirm, service, id, owner).Scan(&n); err != nil {
			return err
		}
	}
	if n == 0 {
		return fmt.Errorf("workerid: %s %q/%d: row taken or expired: %w", s.opts.table, service, id, watchdog.ErrNotHeld)
	}
	return nil
}

// free marks the row free if it is still owner's, keeping its high-water
// mark (and the last holder's host and PID).
func (s *SQLLeaser) free(ctx context.Context, service string, id int64, owner string) error {
	if _, err := s.db.ExecContext(ctx, s.q.free, service, id, owner); err != nil {
		return s.dbErr(fmt.Sprintf("release %q/%d", service, id), err)
	}
	return nil
}

// List returns the current holders of service's worker IDs in [0, max],
// lowest ID first: the rows whose expiry is ahead on the database's clock.
// Since is when the holder leased the ID and TTL how long its row has left,
// both by the database's clock.
func (s *SQLLeaser) List(ctx context.Context, service string) ([]Holder, error) {
	if err := s.checkService(service); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.q.list, service, s.opts.max)
	if err != nil {
		return nil, s.dbErr(fmt.Sprintf("list %q", service), err)
	}
	defer rows.Close()
	var out []Holder
	for rows.Next() {
		var h Holder
		var since, left int64
		if err := rows.Scan(&h.ID, &h.Owner, &h.Host, &h.PID, &since, &left); err != nil {
			return nil, s.dbErr(fmt.Sprintf("list %q", service), err)
		}
		h.Since = time.UnixMicro(since).UTC()
		h.TTL = time.Duration(left) * time.Microsecond
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr(fmt.Sprintf("list %q", service), err)
	}
	slices.SortFunc(out, func(a, b Holder) int { return int(a.ID - b.ID) })
	return out, nil
}

// HighWater returns the high-water store of one worker ID of service, e.g.
// for an operator tool; a lease's own store is Lease.HighWater.
func (s *SQLLeaser) HighWater(service string, id int64) (idgen.HighWaterStore, error) {
	if err := s.checkService(service); err != nil {
		return nil, err
	}
	if id < 0 || id > s.opts.max {
		return nil, fmt.Errorf("%w: worker ID %d outside [0, %d]", ErrInvalid, id, s.opts.max)
	}
	return &sqlHighWater{s: s, service: service, id: id}, nil
}

// sqlHighWater keeps a mark as Unix milliseconds in the high_water column
// of the ID's row, raised with GREATEST so that a late Store from a stale
// process cannot lower it. Release leaves it in the row.
type sqlHighWater struct {
	s       *SQLLeaser
	service string
	id      int64
}

func (h *sqlHighWater) Load(ctx context.Context) (time.Time, error) {
	var ms int64
	err := h.s.db.QueryRowContext(ctx, h.s.q.loadMark, h.service, h.id).Scan(&ms)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, h.s.dbErr(fmt.Sprintf("load the high-water mark of %q/%d", h.service, h.id), err)
	case ms < 0:
		return time.Time{}, fmt.Errorf("workerid: high-water mark of %q/%d in %s is not a valid mark: %d", h.service, h.id, h.s.opts.table, ms)
	case ms == 0:
		return time.Time{}, nil
	}
	return time.UnixMilli(ms), nil
}

// Store raises the mark; a row that is missing (an operator deleted it) is
// made again, free, with the mark.
func (h *sqlHighWater) Store(ctx context.Context, mark time.Time) error {
	if mark.IsZero() {
		return nil
	}
	if _, err := h.s.db.ExecContext(ctx, h.s.q.storeMark, h.service, h.id, ceilMilli(mark)); err != nil {
		return h.s.dbErr(fmt.Sprintf("store the high-water mark of %q/%d", h.service, h.id), err)
	}
	return nil
}

// sqlQueries are a SQLLeaser's statements. Arguments are in the order
// their comments give; PostgreSQL's are numbered.
type sqlQueries struct {
	ddl       string
	held      string // service, max -> id...
	claim     string // service, id, owner, host, pid, TTL in µs -> MySQL: insert ID 1 if claimed; PostgreSQL: a row if claimed
	renew     string // TTL in µs, service, id, owner
	confirm   string // MySQL: service, id, owner -> count of the row still owner's and not expired
	free      string // service, id, owner
	list      string // service, max -> id, owner, host, pid, created (µs), µs left
	loadMark  string // service, id -> high_water
	storeMark string // service, id, mark (ms)
}

// The database's clock: MySQL's UTC_TIMESTAMP(6) is the statement's start,
// PostgreSQL's now() the start of the statement's (implicit) transaction.
// Both come after the client read its clock before sending.
func newSQLQueries(d sqllock.Dialect, table string) sqlQueries {
	if d == sqllock.MySQL {
		r := strings.NewReplacer("{t}", table, "{now}", "UTC_TIMESTAMP(6)")
		return sqlQueries{
			ddl: r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
  service     VARBINARY(128) NOT NULL,
  id          BIGINT NOT NULL,
  owner       VARBINARY(64) NOT NULL,
  host_name   VARCHAR(255) NOT NULL,
  pid         BIGINT NOT NULL,
  launch_date DATE NOT NULL,
  created     DATETIME(6) NOT NULL,
  modified    DATETIME(6) NOT NULL,
  expires     DATETIME(6) NOT NULL,
  high_water  BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (service, id)
) ENGINE=InnoDB`),
			held: r.Replace("SELECT id FROM {t} WHERE service = ? AND id BETWEEN 0 AND ? AND expires > {now} ORDER BY id"),
			// The VALUES make the insert ID 1 (high_water stays 0); on a
			// duplicate key the first assignment makes it 1 when the row
			// has expired (it is then taken over) and 0 otherwise. The
			// assignments run left to right and see the values assigned
			// before them: expires, which every condition reads, comes
			// last. high_water is kept.
			claim: r.Replace(`INSERT INTO {t} (service, id, owner, host_name, pid, launch_date, created, modified, expires, high_water)
VALUES (?, ?, ?, ?, ?, UTC_DATE(), {now}, {now}, {now} + INTERVAL ? MICROSECOND, LAST_INSERT_ID(1) - 1)
ON DUPLICATE KEY UPDATE
  high_water = high_water + 0 * LAST_INSERT_ID(expires <= {now}),
  owner = IF(expires <= {now}, VALUES(owner), owner),
  host_name = IF(expires <= {now}, VALUES(host_name), host_name),
  pid = IF(expires <= {now}, VALUES(pid), pid),
  launch_date = IF(expires <= {now}, VALUES(launch_date), launch_date),
  created = IF(expires <= {now}, VALUES(created), created),
  modified = IF(expires <= {now}, VALUES(modified), modified),
  expires = IF(expires <= {now}, VALUES(expires), expires)`),
			renew:   r.Replace("UPDATE {t} SET modified = {now}, expires = {now} + INTERVAL ? MICROSECOND WHERE service = ? AND id = ? AND owner = ? AND expires > {now}"),
			confirm: r.Replace("SELECT COUNT(*) FROM {t} WHERE service = ? AND id = ? AND owner = ? AND expires > {now}"),
			free:    r.Replace("UPDATE {t} SET owner = '', modified = {now}, expires = LEAST(expires, {now}) WHERE service = ? AND id = ? AND owner = ?"),
			list: r.Replace(`SELECT id, owner, host_name, pid, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', created), TIMESTAMPDIFF(MICROSECOND, {now}, expires)
FROM {t} WHERE service = ? AND id BETWEEN 0 AND ? AND expires > {now} ORDER BY id`),
			loadMark: r.Replace("SELECT high_water FROM {t} WHERE service = ? AND id = ?"),
			storeMark: r.Replace(`INSERT INTO {t} (service, id, owner, host_name, pid, launch_date, created, modified, expires, high_water)
VALUES (?, ?, '', '', 0, UTC_DATE(), {now}, {now}, {now}, ?)
ON DUPLICATE KEY UPDATE high_water = GREATEST(high_water, VALUES(high_water))`),
		}
	}
	r := strings.NewReplacer("{t}", table)
	return sqlQueries{
		ddl: r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
  service     text NOT NULL,
  id          bigint NOT NULL,
  owner       text NOT NULL,
  host_name   text NOT NULL,
  pid         bigint NOT NULL,
  launch_date date NOT NULL,
  created     timestamptz NOT NULL,
  modified    timestamptz NOT NULL,
  expires     timestamptz NOT NULL,
  high_water  bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (service, id)
)`),
		held: r.Replace("SELECT id FROM {t} WHERE service = $1 AND id BETWEEN 0 AND $2 AND expires > now() ORDER BY id"),
		// A conflicting insert waits for the other transaction on the
		// key, then re-checks the WHERE on the row it committed.
		claim: r.Replace(`INSERT INTO {t} AS w (service, id, owner, host_name, pid, launch_date, created, modified, expires, high_water)
VALUES ($1, $2, $3, $4, $5, (now() AT TIME ZONE 'UTC')::date, now(), now(), now() + $6::bigint * interval '1 microsecond', 0)
ON CONFLICT (service, id) DO UPDATE SET owner = EXCLUDED.owner, host_name = EXCLUDED.host_name, pid = EXCLUDED.pid,
  launch_date = EXCLUDED.launch_date, created = EXCLUDED.created, modified = EXCLUDED.modified, expires = EXCLUDED.expires
WHERE w.expires <= now()
RETURNING w.id`),
		renew: r.Replace("UPDATE {t} SET modified = now(), expires = now() + $1::bigint * interval '1 microsecond' WHERE service = $2 AND id = $3 AND owner = $4 AND expires > now()"),
		free:  r.Replace("UPDATE {t} SET owner = '', modified = now(), expires = LEAST(expires, now()) WHERE service = $1 AND id = $2 AND owner = $3"),
		list: r.Replace(`SELECT id, owner, host_name, pid, (extract(epoch FROM created) * 1000000)::bigint, (extract(epoch FROM expires - now()) * 1000000)::bigint
FROM {t} WHERE service = $1 AND id BETWEEN 0 AND $2 AND expires > now() ORDER BY id`),
		loadMark: r.Replace("SELECT high_water FROM {t} WHERE service = $1 AND id = $2"),
		storeMark: r.Replace(`INSERT INTO {t} AS w (service, id, owner, host_name, pid, launch_date, created, modified, expires, high_water)
VALUES ($1, $2, '', '', 0, (now() AT TIME ZONE 'UTC')::date, now(), now(), now(), $3)
ON CONFLICT (service, id) DO UPDATE SET high_water = GREATEST(w.high_water, EXCLUDED.high_water)`),
	}
}
