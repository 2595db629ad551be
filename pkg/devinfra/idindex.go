package devinfra

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the driver FerretDB itself uses; registered as "sqlite"
)

// FerretDB 1.24 on SQLite indexes _id on the expression
// `_ferretdb_sjson->"_id"` but looks documents up with
// `_ferretdb_sjson->'$._id'`. SQLite matches index expressions by their
// text, so it never uses that index and every get scans the table. The
// embedded store owns its SQLite files, so idIndexer adds, to every
// collection table, an index on the very expression of the lookups.
// Production (MongoDB) is not concerned.

// idExpr is FerretDB's metadata.IDColumn: the expression of its _id lookups.
const idExpr = `_ferretdb_sjson->'$._id'`

// idIndexSuffix names the index added to each table.
const idIndexSuffix = "_nubes_id"

// IDIndexInterval is how often new collections get their _id index.
var IDIndexInterval = 500 * time.Millisecond

type idIndexer struct {
	dir string
	log *slog.Logger
	// exclusive runs its CREATE INDEX statements holding every turn of
	// the file's database in the store's write order (serialwrites): a
	// writer of SQLite beside FerretDB's made FerretDB's writes wait in
	// SQLite's busy handler, while the whole queue of the proxy waited
	// behind them. Other databases are other files, which it leaves be.
	exclusive func(db string, fn func() error) error
	mu        sync.Mutex
	files     map[string]*indexedFile
}

// indexedFile is one database file the sweeps keep a connection to: a
// fresh connection parses the whole schema before its first statement,
// and every write changes the file, so opening one per changed file and
// sweep took a fifth of a devstack test's CPU. A kept connection reads
// the schema's version, a header field, and lists the tables only when
// it moved.
type indexedFile struct {
	db   *sql.DB
	file os.FileInfo // what was opened: a database dropped and created again is another file
	// mod is the file's modification time when it was last found
	// complete, schema its schema version then (0: list the tables).
	mod    time.Time
	schema int64
}

func newIDIndexer(dir string, log *slog.Logger, exclusive func(string, func() error) error) *idIndexer {
	return &idIndexer{dir: dir, log: log, exclusive: exclusive, files: map[string]*indexedFile{}}
}

// run sweeps the directory until ctx is done.
func (x *idIndexer) run(ctx context.Context) {
	defer x.close()
	t := time.NewTicker(IDIndexInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := x.sweep(ctx); err != nil && ctx.Err() == nil {
				x.log.Warn("indexing _id of the embedded store", "error", err.Error())
			}
		}
	}
}

// close closes the connections the sweeps kept.
func (x *idIndexer) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for f, xf := range x.files {
		_ = xf.db.Close()
		delete(x.files, f)
	}
}

// sweep adds the _id index to every table of every database file that
// changed since it was last found complete.
func (x *idIndexer) sweep(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	files, err := filepath.Glob(filepath.Join(x.dir, "*.sqlite"))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			continue // dropped meanwhile
		}
		mod := st.ModTime()
		if wal, err := os.Stat(f + "-wal"); err == nil && wal.ModTime().After(mod) {
			mod = wal.ModTime()
		}
		xf := x.files[f]
		if xf != nil && !os.SameFile(xf.file, st) {
			_ = xf.db.Close()
			delete(x.files, f)
			xf = nil
		}
		if xf != nil && xf.mod.Equal(mod) {
			continue
		}
		if xf == nil {
			if xf, err = openIndexed(f, st); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", filepath.Base(f), err))
				continue
			}
			x.files[f] = xf
		}
		if err := xf.index(ctx, x.exclusive); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Base(f), err))
			continue
		}
		xf.mod = mod
	}
	for f, xf := range x.files {
		if st, err := os.Stat(f); err != nil || !os.SameFile(xf.file, st) {
			_ = xf.db.Close()
			delete(x.files, f)
		}
	}
	return errors.Join(errs...)
}

func openIndexed(path string, st os.FileInfo) (*indexedFile, error) {
	// mode=rw: never create a file FerretDB has just dropped.
	db, err := sql.Open("sqlite", "file:"+path+"?mode=rw&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return &indexedFile{db: db, file: st}, nil
}

// index gives every table of the file that lacks it the _id index,
// unless the schema is the one last found complete.
func (xf *indexedFile) index(ctx context.Context, exclusive func(string, func() error) error) error {
	var before int64
	if err := xf.db.QueryRowContext(ctx, `PRAGMA schema_version`).Scan(&before); err != nil {
		if isGone(err) {
			return nil
		}
		return err
	}
	if before != 0 && before == xf.schema {
		return nil
	}
	rows, err := xf.db.QueryContext(ctx, `SELECT m.name FROM sqlite_master m
		WHERE m.type = 'table' AND m.name NOT LIKE '\_ferretdb\_%' ESCAPE '\' AND m.name NOT LIKE 'sqlite\_%' ESCAPE '\'
		AND NOT EXISTS (SELECT 1 FROM sqlite_master i WHERE i.type = 'index' AND i.name = m.name || ?)`, idIndexSuffix)
	if err != nil {
		if isGone(err) {
			return nil
		}
		return err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(tables) > 0 {
		// FerretDB names a database's file <database>.sqlite.
		db := strings.TrimSuffix(xf.file.Name(), ".sqlite")
		err := exclusive(db, func() error {
			for _, t := range tables {
				q := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %q ON %q (%s)`, t+idIndexSuffix, t, idExpr)
				if _, err := xf.db.ExecContext(ctx, q); err != nil && !isGone(err) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	// Each index made moved the version by one; a version that moved
	// more had another change in between (a table FerretDB created):
	// the next sweep lists the tables again.
	var after int64
	if err := xf.db.QueryRowContext(ctx, `PRAGMA schema_version`).Scan(&after); err != nil {
		return err
	}
	xf.schema = 0
	if after == before+int64(len(tables)) {
		xf.schema = after
	}
	return nil
}

// isGone reports an error of a table or file dropped during the sweep.
func isGone(err error) bool {
	s := err.Error()
	return strings.Contains(s, "no such table") || strings.Contains(s, "unable to open") || strings.Contains(s, "disk I/O")
}
