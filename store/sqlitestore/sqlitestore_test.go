package sqlitestore_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/sqlitestore"
	"github.com/reconciler/reconciler/store/storetest"
)

// openDB returns a migrated SQLite file in t's temporary directory.
func openDB(t testing.TB) *gorm.DB {
	t.Helper()
	db, err := dbopen.SQLite(filepath.Join(t.TempDir(), "reconciler.db"))
	require.NoError(t, err)
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	_, err = models.Migrate(context.Background(), db)
	require.NoError(t, err)
	return db
}

func open(t *testing.T) store.Store { return sqlitestore.New(openDB(t), nil) }

func dbOf(s store.Store) *gorm.DB { return s.(*sqlitestore.Store).DB }

func TestStoreSuite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, open, storetest.Options{
		Dialect:   "sqlite",
		DB:        dbOf,
		WithClock: func(s store.Store, c clock.Clock) store.Store { return sqlitestore.New(dbOf(s), c) },
		Precision: time.Millisecond,
		LoseLock: func(t *testing.T, s store.Store, key string) {
			// Another process took the lock over (this one was thought dead).
			require.NoError(t, dbOf(s).Exec(`UPDATE run_locks SET pid = ? WHERE key = ?`, os.Getppid(), key).Error)
		},
	})
}

// The embedded store's run lock is a row naming its holder's host and pid:
// a holder that died on this machine is taken over, a live one or one on
// another host is respected.

type lockRow struct {
	Key  string
	Host string
	Pid  int
}

func lockRows(t *testing.T, db *gorm.DB) []lockRow {
	t.Helper()
	var out []lockRow
	require.NoError(t, db.Raw(`SELECT key, host, pid FROM run_locks ORDER BY key`).Scan(&out).Error)
	return out
}

// deadPid is the pid of a process of this machine that has exited.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

func hold(t *testing.T, db *gorm.DB, key, host string, pid int) {
	t.Helper()
	require.NoError(t, db.Exec(`INSERT INTO run_locks (key, host, pid) VALUES (?, ?, ?)`, key, host, pid).Error)
}

func TestLockTakesOverADeadLocalHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	st := sqlitestore.New(db, nil)
	host, err := os.Hostname()
	require.NoError(t, err)
	hold(t, db, "stripe/", host, deadPid(t))
	l, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	require.Equal(t, []lockRow{{"stripe/", host, os.Getpid()}}, lockRows(t, db))
	require.NoError(t, l.Release(ctx))
	require.Empty(t, lockRows(t, db))
}

func TestLockRespectsALiveOrRemoteHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	st := sqlitestore.New(db, nil)
	host, err := os.Hostname()
	require.NoError(t, err)
	hold(t, db, "alive/", host, os.Getppid())
	hold(t, db, "remote/", "another-host", deadPid(t))
	for _, key := range []string{"alive/", "remote/"} {
		_, err := st.TryLock(ctx, key)
		require.ErrorIs(t, err, store.ErrLocked, key)
	}
	require.Len(t, lockRows(t, db), 2, "nothing taken over")
}

func TestLockReleaseLeavesAnotherHoldersRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	st := sqlitestore.New(db, nil)
	l, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	// Another process took the lock over meanwhile (this one was thought
	// dead): releasing ours must not free theirs.
	require.NoError(t, db.Exec(`UPDATE run_locks SET pid = ? WHERE key = ?`, os.Getppid(), "stripe/").Error)
	require.NoError(t, l.Release(ctx))
	host, _ := os.Hostname()
	require.Equal(t, []lockRow{{"stripe/", host, os.Getppid()}}, lockRows(t, db))
}
