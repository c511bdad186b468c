package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coordkit/coordkit/idgen/sqlid"
)

// The sqlid backend: every client process draws IDs from idgen/sqlid's
// Leaf segments of one tag on MariaDB (part sql-my) and on PostgreSQL
// (part sql-pg), idGoroutines goroutines per part, through its slot's
// proxies, and writes them to its ID file as the ids backend does
// (idfile.go). The checker (checkids.go) sorts each part's IDs: a value
// issued twice is an anomaly, unless two processes issued it after a
// sqlid-rollback of that part's database (sqlid/doc.go, Restoring an older
// backup: every process that drew from the ranges handed out again can
// repeat IDs, but a generator never repeats its own).

// Parts of the sqlid backend, as stored in a block.
const (
	partSQLMy uint8 = 4 // sqlid Leaf segments on MariaDB
	partSQLPg uint8 = 5 // sqlid Leaf segments on PostgreSQL
)

func init() {
	partNames[partSQLMy] = "sql-my"
	partNames[partSQLPg] = "sql-pg"
}

// segmentPart reports whether part's IDs come from segments (no worker ID,
// no lease).
func segmentPart(part uint8) bool { return part == partSeg || part == partSQLMy || part == partSQLPg }

// fSQLIDRollback is sqlid-rollback: the tag's row set back to the max_id
// it had 0.5 to 2 s before, as a database restored from an older backup (or
// a row set back by hand) has it.
const fSQLIDRollback = "sqlid-rollback"

// dSQLIDRollback counts the values two processes issued after a
// sqlid-rollback of their part's database (documented).
const dSQLIDRollback = "duplicate-sqlid-rollback"

// isIDBackend reports whether b is checked by the ID checkers.
func isIDBackend(b string) bool { return b == "ids" || b == "sqlid" }

// sqlidStep and sqlidMaxStep are the tag's row step and the generators'
// largest step; the target interval is short, so the step adapts within a
// run.
const (
	sqlidStep     = 1000
	sqlidMaxStep  = 100_000
	sqlidInterval = time.Second
)

// dupDocumented reports whether value issued twice by x and then y, in
// one of the segment parts, is documented: by two processes, after a data
// loss of the part's store that began before y's call ended.
func dupDocumented(faults []Fault, x, y issuer) (string, bool) {
	if x.proc == y.proc {
		return "", false
	}
	for _, f := range faults {
		if f.Err != "" || f.Start >= y.end {
			continue
		}
		switch x.h.Part {
		case partSeg:
			if f.Kind == fRestartNoData || f.Kind == fRestartSnapshot {
				return dSegDataLoss, true
			}
		case partSQLMy, partSQLPg:
			if f.Kind == fSQLIDRollback && f.Target == sqlidServer[x.h.Part] {
				return dSQLIDRollback, true
			}
		}
	}
	return "", false
}

// sqlidServer names the server of each sqlid part (as faults name it).
var sqlidServer = map[uint8]string{partSQLMy: "mariadb", partSQLPg: "postgres"}

// runSQLIDs runs the sqlid backend's client until ctx ends: cfg.addrs are
// the MariaDB and PostgreSQL DSNs.
func runSQLIDs(ctx context.Context, cfg clientConfig, rec *Recorder) error {
	c := &idsClient{cfg: cfg, rec: rec}
	var err error
	if c.file, err = CreateIDFile(cfg.idsOut); err != nil {
		return err
	}
	defer c.file.Close()
	var wg sync.WaitGroup
	for i, p := range []struct {
		part   uint8
		driver string
		d      sqlid.Dialect
	}{{partSQLMy, "mysql", sqlid.MySQL}, {partSQLPg, "pgx", sqlid.Postgres}} {
		db, err := sql.Open(p.driver, cfg.addrs[i])
		if err != nil {
			return err
		}
		defer db.Close()
		segs, err := sqlid.NewLeaf(db, p.d, sqlid.WithMaxStep(sqlidMaxStep), sqlid.WithTargetInterval(sqlidInterval))
		if err != nil {
			return err
		}
		defer segs.Close()
		seg, err := segs.For(idService)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { // owned by runSQLIDs: ends when ctx ends
			defer wg.Done()
			c.segments(ctx, p.part, seg)
		}()
	}
	wg.Wait()
	return nil
}

// createSQLIDTables creates Leaf's table in both databases and registers
// the tag (max_id 1, step sqlidStep), before the clients start.
func (s *sqlServers) createSQLIDTables(ctx context.Context) error {
	for _, p := range []struct {
		db *sql.DB
		d  sqlid.Dialect
	}{{s.myDB, sqlid.MySQL}, {s.pgDB, sqlid.Postgres}} {
		segs, err := sqlid.NewLeaf(p.db, p.d)
		if err != nil {
			return err
		}
		err = segs.CreateTable(ctx)
		if err == nil {
			err = segs.Register(ctx, idService, 1, sqlidStep, "chaos")
			if errors.Is(err, sqlid.ErrTagExists) {
				err = nil
			}
		}
		segs.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// rollbackSQLID is sqlid-rollback: read the tag's max_id, let the clients
// draw for d, then set the row back to it.
func rollbackSQLID(ctx context.Context, db *sql.DB, mysql bool, d time.Duration) (string, error) {
	get, set := "SELECT max_id FROM "+sqlid.LeafTable+" WHERE biz_tag = ?", "UPDATE "+sqlid.LeafTable+" SET max_id = ? WHERE biz_tag = ?"
	if !mysql {
		get, set = "SELECT max_id FROM "+sqlid.LeafTable+" WHERE biz_tag = $1", "UPDATE "+sqlid.LeafTable+" SET max_id = $1 WHERE biz_tag = $2"
	}
	var old, now int64
	if err := db.QueryRowContext(ctx, get, idService).Scan(&old); err != nil {
		return "", err
	}
	sleepCtx(ctx, d)
	if err := db.QueryRowContext(ctx, get, idService).Scan(&now); err != nil {
		return "", err
	}
	if _, err := db.ExecContext(ctx, set, old, idService); err != nil {
		return "", err
	}
	return fmt.Sprintf("max_id set back from %d to %d (%v before)", now, old, d), nil
}
