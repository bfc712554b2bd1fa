package dbopen

import (
	"context"
	"errors"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// ErrNotMigrated is OpenStore's error for a caller that only reads when
// the database has no reconciler schema or a migration is pending.
var ErrNotMigrated = errors.New("the database has no reconciler schema or pending migrations: run reconciler migrate")

// OpenStore opens the database as Open does, with the store of its
// dialect on the wall clock, and returns the function that closes its
// connections. With p.MustExist the caller only reads: the embedded
// store's file is never created (ErrNoEmbeddedStore), and the schema must
// be there with no migration pending (ErrNotMigrated).
func OpenStore(ctx context.Context, p Params) (*gorm.DB, store.Store, func(), error) {
	db, err := Open(ctx, p)
	if err != nil {
		return nil, nil, nil, err
	}
	release := func() { closeDB(db) }
	if p.MustExist {
		if pending, err := models.Pending(ctx, db); err != nil || len(pending) > 0 {
			release()
			return nil, nil, nil, ErrNotMigrated
		}
	}
	return db, Store(db, nil), release, nil
}
