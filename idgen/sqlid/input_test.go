package sqlid_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen/sqlid"
)

// TestNewBadInput: constructors refuse what cannot work, with errors
// matching ErrInvalid, and never panic.
func TestNewBadInput(t *testing.T) {
	db := backends[0].openDB(t)
	cases := []struct {
		name string
		new  func() error
		want error
	}{
		{"nil db", func() error { _, err := sqlid.NewLeaf(nil, sqlid.MySQL); return err }, sqlid.ErrBadOption},
		{"zero dialect", func() error { _, err := sqlid.NewLeaf(db, 0); return err }, sqlid.ErrBadOption},
		{"unknown dialect", func() error { _, err := sqlid.NewLeaf(db, 7); return err }, sqlid.ErrBadOption},
		{"table with SQL", func() error { _, err := sqlid.NewLeaf(db, sqlid.MySQL, sqlid.WithTable("t; DROP TABLE x")); return err }, sqlid.ErrBadOption},
		{"max step 0", func() error { _, err := sqlid.NewLeaf(db, sqlid.MySQL, sqlid.WithMaxStep(0)); return err }, sqlid.ErrBadStep},
		{"max step above INT", func() error { _, err := sqlid.NewLeaf(db, sqlid.MySQL, sqlid.WithMaxStep(1<<31)); return err }, sqlid.ErrBadStep},
		{"target 0", func() error { _, err := sqlid.NewLeaf(db, sqlid.MySQL, sqlid.WithTargetInterval(0)); return err }, sqlid.ErrBadOption},
		{"fetch timeout 0", func() error { _, err := sqlid.NewLeaf(db, sqlid.MySQL, sqlid.WithFetchTimeout(0)); return err }, sqlid.ErrBadOption},
		{"retry delay < 0", func() error { _, err := sqlid.NewLeaf(db, sqlid.MySQL, sqlid.WithRetryDelay(-time.Second)); return err }, sqlid.ErrBadOption},
		{"nil clock", func() error { _, err := sqlid.NewLeaf(db, sqlid.MySQL, sqlid.WithClock(nil)); return err }, sqlid.ErrBadOption},
		{"no stores", func() error { _, err := sqlid.NewTinyid(nil); return err }, sqlid.ErrBadOption},
		{"nil store db", func() error {
			_, err := sqlid.NewTinyid([]sqlid.Store{{DB: db, Dialect: sqlid.MySQL}, {Dialect: sqlid.Postgres}})
			return err
		}, sqlid.ErrBadOption},
		{"tickets nil db", func() error { _, err := sqlid.NewTickets(nil, sqlid.MySQL); return err }, sqlid.ErrBadOption},
		{"tickets bad dialect", func() error { _, err := sqlid.NewTickets(db, 0); return err }, sqlid.ErrBadOption},
		{"tickets bad name", func() error { _, err := sqlid.NewTickets(db, sqlid.MySQL, sqlid.WithTicketTable("x'y")); return err }, sqlid.ErrBadOption},
		{"tickets step 0", func() error { _, err := sqlid.NewTickets(db, sqlid.Postgres, sqlid.WithSequenceStep(0, 1)); return err }, sqlid.ErrBadStep},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.new()
			if !errors.Is(err, c.want) || !errors.Is(err, sqlid.ErrInvalid) {
				t.Fatalf("got %v, want %v (and ErrInvalid)", err, c.want)
			}
		})
	}
}

// TestTagBadInput: an empty tag or one longer than the column is refused
// before any I/O, by For, Next and Register.
func TestTagBadInput(t *testing.T) {
	ctx := ctxT(t)
	b := backends[0]
	leaf := newLeaf(t, b.openDB(t), b.dialect, uniqueName(t))
	tiny := newTinyid(t, []sqlid.Store{{DB: b.openDB(t), Dialect: b.dialect}}, uniqueName(t))
	for _, c := range []struct {
		name string
		s    *sqlid.Segments
		tag  string
		want error
	}{
		{"leaf empty", leaf, "", sqlid.ErrEmptyTag},
		{"leaf 129 characters", leaf, strings.Repeat("a", 129), sqlid.ErrBadTag},
		{"tinyid 64 characters", tiny, strings.Repeat("a", 64), sqlid.ErrBadTag},
		{"not UTF-8", leaf, "a\xff", sqlid.ErrBadTag},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := c.s.For(c.tag); !errors.Is(err, c.want) || !errors.Is(err, sqlid.ErrInvalid) {
				t.Fatalf("For: %v", err)
			}
			if _, err := c.s.Next(ctx, c.tag); !errors.Is(err, c.want) {
				t.Fatalf("Next: %v", err)
			}
			if err := c.s.Register(ctx, c.tag, 1, 10, ""); !errors.Is(err, c.want) {
				t.Fatalf("Register: %v", err)
			}
		})
	}
	if _, err := leaf.For(strings.Repeat("é", 128)); err != nil {
		t.Fatalf("128 characters (256 bytes): %v", err)
	}
}

// TestRegisterBadInput: Register refuses a negative max_id, a step that is
// not positive, one below the number of databases, and a tag that exists.
func TestRegisterBadInput(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		s := newLeaf(t, b.openDB(t), b.dialect, uniqueName(t))
		for _, c := range []struct {
			name  string
			maxID int64
			step  int
			want  error
		}{
			{"negative max_id", -1, 10, sqlid.ErrBadStep},
			{"step 0", 1, 0, sqlid.ErrBadStep},
			{"negative step", 1, -5, sqlid.ErrBadStep},
		} {
			if err := s.Register(ctx, "x", c.maxID, c.step, ""); !errors.Is(err, c.want) || !errors.Is(err, sqlid.ErrInvalid) {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		if err := s.Register(ctx, "x", 1, 10, ""); err != nil {
			t.Fatal(err)
		}
		if err := s.Register(ctx, "x", 1, 10, ""); !errors.Is(err, sqlid.ErrTagExists) {
			t.Fatalf("again: %v", err)
		}
		tiny := newTinyid(t, []sqlid.Store{{DB: b.openDB(t), Dialect: b.dialect}, {DB: b.openDB(t), Dialect: b.dialect}}, uniqueName(t))
		if err := tiny.Register(ctx, "x", 0, 1, ""); !errors.Is(err, sqlid.ErrBadStep) {
			t.Fatalf("Tinyid step 1 over 2 databases: %v", err)
		}
	})
}

// TestUnknownTag: a tag without a row is ErrUnknownTag (and ErrInvalid),
// naming the tag and the table and saying how to register it; nothing is
// written.
func TestUnknownTag(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		table := uniqueName(t)
		for _, s := range []*sqlid.Segments{
			newLeaf(t, b.openDB(t), b.dialect, table),
			newTinyid(t, []sqlid.Store{{DB: b.openDB(t), Dialect: b.dialect}}, table+"_tiny"),
		} {
			for range 2 { // and again: the error does not stick
				_, err := s.Next(ctx, "nobody")
				if !errors.Is(err, sqlid.ErrUnknownTag) || !errors.Is(err, sqlid.ErrInvalid) ||
					!strings.Contains(err.Error(), `"nobody"`) || !strings.Contains(err.Error(), s.Table()) || !strings.Contains(err.Error(), "Register") {
					t.Fatalf("unknown tag: %v", err)
				}
			}
			if err := s.Register(ctx, "nobody", 1, 10, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Next(ctx, "nobody"); err != nil {
				t.Fatalf("after Register: %v", err)
			}
		}
	})
}

// TestMissingTable: a table that does not exist is ErrNoTable, naming it,
// with its CREATE statement.
func TestMissingTable(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		table := uniqueName(t)
		leaf, err := sqlid.NewLeaf(b.openDB(t), b.dialect, quiet, sqlid.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		defer leaf.Close()
		tiny, err := sqlid.NewTinyid([]sqlid.Store{{DB: b.openDB(t), Dialect: b.dialect}}, quiet, sqlid.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		defer tiny.Close()
		for _, s := range []*sqlid.Segments{leaf, tiny} {
			_, err := s.Next(ctx, "order")
			if !errors.Is(err, sqlid.ErrNoTable) || !strings.Contains(err.Error(), table) ||
				!strings.Contains(err.Error(), "CREATE TABLE") || !strings.Contains(err.Error(), "CreateTable") {
				t.Fatalf("missing table: %v", err)
			}
			if err := s.Register(ctx, "order", 1, 10, ""); !errors.Is(err, sqlid.ErrNoTable) {
				t.Fatalf("Register into a missing table: %v", err)
			}
		}
	})
}

// TestBadRows: rows that cannot hand out IDs (Leaf: step 0, a negative
// step, a negative max_id; Tinyid: also a NULL step, delta 0, a remainder
// outside [0, delta), a step below delta) are ErrBadRow, showing the
// values; the row is not changed and no ID is handed out.
func TestBadRows(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		db := b.openDB(t)
		leafTable, tinyTable := uniqueName(t), uniqueName(t)+"_tiny"
		leaf := newLeaf(t, db, b.dialect, leafTable)
		tiny := newTinyid(t, []sqlid.Store{{DB: db, Dialect: b.dialect}}, tinyTable)
		rows := []struct {
			s      *sqlid.Segments
			tag    string
			insert string
		}{
			{leaf, "step0", "INSERT INTO " + leafTable + " (biz_tag, max_id, step) VALUES ('step0', 1, 0)"},
			{leaf, "stepneg", "INSERT INTO " + leafTable + " (biz_tag, max_id, step) VALUES ('stepneg', 1, -10)"},
			{leaf, "maxneg", "INSERT INTO " + leafTable + " (biz_tag, max_id, step) VALUES ('maxneg', -5, 10)"},
			{tiny, "stepnull", "INSERT INTO " + tinyTable + " (biz_type, max_id, step) VALUES ('stepnull', 0, NULL)"},
			{tiny, "step0", "INSERT INTO " + tinyTable + " (biz_type, max_id, step) VALUES ('step0', 0, 0)"},
			{tiny, "maxneg", "INSERT INTO " + tinyTable + " (biz_type, max_id, step) VALUES ('maxneg', -1, 10)"},
			{tiny, "delta0", "INSERT INTO " + tinyTable + " (biz_type, max_id, step, delta) VALUES ('delta0', 0, 10, 0)"},
			{tiny, "rem", "INSERT INTO " + tinyTable + " (biz_type, max_id, step, delta, remainder) VALUES ('rem', 0, 10, 2, 2)"},
			{tiny, "remneg", "INSERT INTO " + tinyTable + " (biz_type, max_id, step, delta, remainder) VALUES ('remneg', 0, 10, 2, -1)"},
			{tiny, "small", "INSERT INTO " + tinyTable + " (biz_type, max_id, step, delta, remainder) VALUES ('small', 0, 2, 3, 0)"},
		}
		for _, r := range rows {
			if _, err := db.ExecContext(ctx, r.insert); err != nil {
				t.Fatal(err)
			}
			_, err := r.s.Next(ctx, r.tag)
			if !errors.Is(err, sqlid.ErrBadRow) || errors.Is(err, sqlid.ErrInvalid) || !strings.Contains(err.Error(), r.tag) {
				t.Fatalf("%s in %s: %v", r.tag, r.s.Table(), err)
			}
			t.Logf("%v", err)
			var maxID sql.NullInt64
			col := "biz_tag"
			if r.s == tiny {
				col = "biz_type"
			}
			if err := db.QueryRowContext(ctx, "SELECT max_id FROM "+r.s.Table()+" WHERE "+col+" = '"+r.tag+"'").Scan(&maxID); err != nil {
				t.Fatal(err)
			}
			if maxID.Int64 > 1 {
				t.Fatalf("%s: max_id changed to %d", r.tag, maxID.Int64)
			}
		}
	})
}

// TestOverflow: a max_id near the largest BIGINT: the reservation that
// would pass it is ErrOverflow, and nothing is handed out past it.
func TestOverflow(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := ctxT(t)
		s := newLeaf(t, b.openDB(t), b.dialect, uniqueName(t))
		if err := s.Register(ctx, "big", 1<<63-1-1500, 1000, ""); err != nil {
			t.Fatal(err)
		}
		g, _ := s.For("big")
		ids := draw(t, ctx, g, 1000)
		var err error
		for range 2000 {
			if _, err = g.Next(ctx); err != nil {
				break
			}
		}
		if !errors.Is(err, sqlid.ErrOverflow) {
			t.Fatalf("past the largest BIGINT: %v", err)
		}
		increasing(t, ids)
	})
}
