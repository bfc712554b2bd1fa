// TEMPORARY: replaced by openSQLite when the SQLite store lands

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/reconciler/reconciler/models"
)

// demoDB opens the demo's database at path, creating it when it does not
// exist, and applies the migrations.
//
// Until the embedded store lands this stands in for it with a schema
// demo_<hash of path> in the PostgreSQL of DATABASE_URL: the file at path
// is only a marker (so that "--db FILE" keeps and reuses one, as the SQLite
// file will), and a fresh path is a fresh schema.
func demoDB(ctx context.Context, path string) (*gorm.DB, error) {
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		return nil, errors.New("demo: the embedded store is not there yet; set DATABASE_URL meanwhile")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(abs))
	schema := "demo_" + hex.EncodeToString(sum[:8])
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(abs, []byte("reconciler demo: stands in for the SQLite file; schema "+schema+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("demo database: %w", err)
		}
	}
	open := func(dsn string) (*gorm.DB, error) {
		return gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard, NowFunc: func() time.Time { return time.Now().UTC() }})
	}
	admin, err := open(base)
	if err != nil {
		return nil, fmt.Errorf("connect to the database: %s", redactDSN(err.Error(), base))
	}
	err = admin.WithContext(ctx).Exec(`CREATE SCHEMA IF NOT EXISTS ` + schema).Error
	if sqlDB, e := admin.DB(); e == nil {
		_ = sqlDB.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		return nil, errors.New("demo: DATABASE_URL must be a postgres:// URL")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := open(u.String())
	if err != nil {
		return nil, fmt.Errorf("connect to the database: %s", redactDSN(err.Error(), u.String()))
	}
	if _, err := models.Migrate(ctx, db); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return db, nil
}
