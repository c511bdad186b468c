package sqlid

import (
	"strings"
)

// kind is a segment table's schema: Leaf's leaf_alloc or Tinyid's
// tiny_id_info.
type kind int

const (
	leafKind kind = iota + 1
	tinyidKind
)

func (k kind) tagColumn() string {
	if k == tinyidKind {
		return "biz_type"
	}
	return "biz_tag"
}

// maxTag is the length of the tag column.
func (k kind) maxTag() int {
	if k == tinyidKind {
		return 63
	}
	return 128
}

// ddl returns the CREATE TABLE statement of a segment table.
func ddl(k kind, d Dialect, table string) string {
	switch {
	case k == leafKind && d == MySQL:
		// Leaf's own (scripts/leaf_alloc.sql), names and types.
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
  biz_tag     VARCHAR(128) NOT NULL DEFAULT '',
  max_id      BIGINT NOT NULL DEFAULT 1,
  step        INT NOT NULL,
  description VARCHAR(256) DEFAULT NULL,
  update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (biz_tag)
) ENGINE=InnoDB`
	case k == leafKind:
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
  biz_tag     varchar(128) NOT NULL DEFAULT '' PRIMARY KEY,
  max_id      bigint NOT NULL DEFAULT 1,
  step        integer NOT NULL,
  description varchar(256),
  update_time timestamp NOT NULL DEFAULT now()
)`
	case d == MySQL:
		// Tinyid's own (tinyid-server/db.sql), names and types; the time
		// columns default to the current time instead of 2010-01-01.
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  biz_type    VARCHAR(63) NOT NULL DEFAULT '',
  begin_id    BIGINT NOT NULL DEFAULT 0,
  max_id      BIGINT NOT NULL DEFAULT 0,
  step        INT DEFAULT 0,
  delta       INT NOT NULL DEFAULT 1,
  remainder   INT NOT NULL DEFAULT 0,
  create_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  version     BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  UNIQUE KEY uniq_biz_type (biz_type)
) ENGINE=InnoDB`
	default:
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
  id          bigserial PRIMARY KEY,
  biz_type    varchar(63) NOT NULL DEFAULT '' UNIQUE,
  begin_id    bigint NOT NULL DEFAULT 0,
  max_id      bigint NOT NULL DEFAULT 0,
  step        integer DEFAULT 0,
  delta       integer NOT NULL DEFAULT 1,
  remainder   integer NOT NULL DEFAULT 0,
  create_time timestamp NOT NULL DEFAULT now(),
  update_time timestamp NOT NULL DEFAULT now(),
  version     bigint NOT NULL DEFAULT 0
)`
	}
}

// segSQL is the SQL of one segment table.
type segSQL struct {
	// incTable adds the row's step to max_id; incBy adds the argument.
	// Arguments: tag (and the step). Rows whose values cannot hand out IDs
	// are not matched (so not changed). Postgres: RETURNING the new row;
	// MySQL: followed by read in the same transaction.
	incTable, incBy string
	// raise sets max_id = GREATEST(max_id, low) + step. Arguments: tag,
	// low, step (MySQL: low, step, tag).
	raise string
	// read returns the row's max_id, step, delta and remainder (Leaf:
	// delta 1, remainder 0). Argument: tag.
	read string
	// register inserts a row. Leaf arguments: tag, max_id, step,
	// description. Tinyid: tag, begin_id = max_id, step, delta, remainder.
	register string
}

func newSegSQL(k kind, d Dialect, table string) segSQL {
	var s segSQL
	r := strings.NewReplacer("{t}", table, "{tag}", k.tagColumn())
	valid := "step > 0 AND max_id >= 0"
	set := ", update_time = now()"
	cols := "max_id, step, 1, 0"
	if k == tinyidKind {
		valid += " AND delta > 0 AND step >= delta AND remainder >= 0 AND remainder < delta"
		set += ", version = version + 1" // Tinyid's own servers compare and set on version
		cols = "max_id, step, delta, remainder"
	}
	if d == MySQL {
		s.incTable = r.Replace("UPDATE {t} SET max_id = max_id + step" + set + " WHERE {tag} = ? AND " + valid)
		s.incBy = r.Replace("UPDATE {t} SET max_id = max_id + ?" + set + " WHERE {tag} = ? AND " + valid)
		s.raise = r.Replace("UPDATE {t} SET max_id = GREATEST(max_id, ?) + ?" + set + " WHERE {tag} = ?")
		s.read = r.Replace("SELECT " + cols + " FROM {t} WHERE {tag} = ?")
		if k == leafKind {
			s.register = r.Replace("INSERT INTO {t} (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)")
		} else {
			s.register = r.Replace("INSERT INTO {t} (biz_type, begin_id, max_id, step, delta, remainder, version) VALUES (?, ?, ?, ?, ?, ?, 1)")
		}
		return s
	}
	ret := " RETURNING " + cols
	s.incTable = r.Replace("UPDATE {t} SET max_id = max_id + step" + set + " WHERE {tag} = $1 AND " + valid + ret)
	s.incBy = r.Replace("UPDATE {t} SET max_id = max_id + $2" + set + " WHERE {tag} = $1 AND " + valid + ret)
	s.raise = r.Replace("UPDATE {t} SET max_id = GREATEST(max_id, $2) + $3" + set + " WHERE {tag} = $1" + ret)
	s.read = r.Replace("SELECT " + cols + " FROM {t} WHERE {tag} = $1")
	if k == leafKind {
		s.register = r.Replace("INSERT INTO {t} (biz_tag, max_id, step, description) VALUES ($1, $2, $3, $4)")
	} else {
		s.register = r.Replace("INSERT INTO {t} (biz_type, begin_id, max_id, step, delta, remainder, version) VALUES ($1, $2, $2, $3, $4, $5, 1)")
	}
	return s
}
