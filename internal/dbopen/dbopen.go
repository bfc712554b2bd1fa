// Package dbopen opens the stores: PostgreSQL (production) and the embedded
// SQLite file (trying it out on one machine, through a pure-Go driver, so
// the static build needs no cgo).
package dbopen

import (
	"fmt"
	"net/url"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/pgstore"
	"github.com/reconciler/reconciler/store/sqlitestore"
)

func config() *gorm.Config {
	return &gorm.Config{Logger: logger.Discard, NowFunc: func() time.Time { return time.Now().UTC() }}
}

// Postgres opens a PostgreSQL URL or DSN.
func Postgres(dsn string) (*gorm.DB, error) {
	return gorm.Open(postgres.Open(dsn), config())
}

// SQLite opens (creating) the SQLite file at path: WAL journal, foreign
// keys on, writers waiting for each other up to 10 s, and transactions that
// take the write lock when they begin, so that two writers never deadlock
// upgrading a read.
func SQLite(path string) (*gorm.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	db, err := gorm.Open(sqlite.Open("file:"+path+"?"+q.Encode()), config())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(4)
	return db, nil
}

// Store returns the store of db's dialect, on clock c (nil: the wall
// clock). It is the one place that asks which dialect a connection speaks.
func Store(db *gorm.DB, c clock.Clock) store.Store {
	if db.Dialector.Name() == "sqlite" {
		return sqlitestore.New(db, c)
	}
	return pgstore.New(db, c)
}
