package sqlid

import (
	"errors"
	"fmt"

	"github.com/coordkit/coordkit/internal/sqldb"
)

var (
	// ErrInvalid matches every invalid-argument error of this package
	// (ErrEmptyTag, ErrBadTag, ErrBadStep, ErrBadOption, ErrUnknownTag), as
	// idgen.ErrInvalid and redisid.ErrInvalid do in theirs.
	ErrInvalid = errors.New("sqlid: invalid argument")

	// ErrEmptyTag is returned by For, Next and Register given an empty tag.
	ErrEmptyTag error = &invalidError{"sqlid: empty tag"}

	// ErrBadTag is returned (wrapped, with the reason) for a tag longer than
	// its column holds (leaf_alloc.biz_tag: 128 characters,
	// tiny_id_info.biz_type: 63).
	ErrBadTag error = &invalidError{"sqlid: invalid tag"}

	// ErrBadStep is returned (wrapped, with the value) by Register for a step,
	// delta or remainder out of range, and by constructors for step bounds
	// that are not positive.
	ErrBadStep error = &invalidError{"sqlid: invalid step"}

	// ErrBadOption is returned (wrapped, with the reason) by constructors
	// given a nil *sql.DB, an unknown Dialect or an option value outside its
	// documented range.
	ErrBadOption error = &invalidError{"sqlid: invalid option"}

	// ErrUnknownTag is returned (wrapped, with the tag, the table and the
	// statement that registers it) when the table has no row for the tag.
	// It matches ErrInvalid: the caller named a tag nobody registered.
	ErrUnknownTag error = &invalidError{"sqlid: unknown tag"}

	// ErrNoTable is returned (wrapped, with the table and its CREATE
	// statement) when the table or sequence does not exist.
	ErrNoTable = errors.New("sqlid: table does not exist")

	// ErrBadRow is returned (wrapped, with the values) when a tag's row
	// cannot hand out IDs: a step that is not positive, a negative max_id, a
	// delta below 1 or a remainder outside [0, delta). The row is left as it
	// was and no ID is handed out.
	ErrBadRow = errors.New("sqlid: invalid row")

	// ErrTagExists is returned (wrapped) by Register when the tag has a row.
	ErrTagExists = errors.New("sqlid: tag already registered")

	// ErrOverflow is returned (wrapped) when max_id + step would pass the
	// largest BIGINT.
	ErrOverflow = errors.New("sqlid: max_id overflow")

	// ErrConflict is returned (wrapped, with both rows' delta and remainder)
	// when two databases of a Tinyid generator have rows whose series
	// intersect (remainders congruent modulo the gcd of the deltas): the
	// segment is not served.
	ErrConflict = errors.New("sqlid: databases hand out intersecting series")

	// ErrClosed is returned by Next once Segments.Close has been called and
	// the segments in memory are used up.
	ErrClosed = errors.New("sqlid: closed")
)

// invalidError is an invalid-argument error that also matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// StoreError is the failure of one database of a Tinyid generator (or of
// Register on it). A Next that finds no database able to serve joins one per
// database (errors.Join).
type StoreError struct {
	Index int   // the database's index in the slice given to NewTinyid
	Err   error // what went wrong on it
}

func (e *StoreError) Error() string { return fmt.Sprintf("sqlid: database %d: %v", e.Index, e.Err) }

// Unwrap returns the database's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Error codes this package reacts to besides internal/sqldb's (read by
// sqldb.Codes).
const (
	mysqlDupKey     = 1062 // ER_DUP_ENTRY
	mysqlOutOfRange = 1690 // ER_DATA_OUT_OF_RANGE
	mysqlWarnRange  = 1264 // ER_WARN_DATA_OUT_OF_RANGE (strict mode)

	pgUnique     = "23505" // unique_violation
	pgOutOfRange = "22003" // numeric_value_out_of_range
	pgSeqLimit   = "2200H" // sequence_generator_limit_exceeded
)

func isNoTable(err error) bool {
	n, s := sqldb.Codes(err)
	return n == sqldb.MySQLNoSuchTable || s == sqldb.PGUndefinedTable
}

func isDupKey(err error) bool {
	n, s := sqldb.Codes(err)
	return n == mysqlDupKey || s == pgUnique
}

func isOutOfRange(err error) bool {
	n, s := sqldb.Codes(err)
	return n == mysqlOutOfRange || n == mysqlWarnRange || s == pgOutOfRange || s == pgSeqLimit
}

func isDeadlock(err error) bool {
	n, _ := sqldb.Codes(err)
	return n == sqldb.MySQLDeadlock
}
