package sqlitestore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
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

var suite = storetest.Options{
	Dialect:   "sqlite",
	DB:        dbOf,
	WithClock: func(s store.Store, c clock.Clock) store.Store { return sqlitestore.New(dbOf(s), c) },
	Precision: time.Millisecond,
	LoseLock: func(t *testing.T, s store.Store, key string) {
		// Another process took the lock over (this one was thought dead).
		require.NoError(t, dbOf(s).Exec(`UPDATE run_locks SET pid = ? WHERE key = ?`, os.Getppid(), key).Error)
	},
}

func TestStoreSuite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, open, suite)
}

// TestStoreSuiteMapped runs the suite on an application schema of its own
// (issue 18: table orders, every column and state renamed; pgtest's mapped
// layout): every statement must honour the mapping.
func TestStoreSuiteMapped(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return sqlitestore.New(pgtest.NewSQLiteMapped(t).DB, nil) }, suite)
}

// The embedded store's run lock is an OS lock on a file beside the
// database: a live holder in another process locks the key out, a holder
// that died releases it with its process, whatever its row says.

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

func hold(t *testing.T, db *gorm.DB, key, host string, pid int) {
	t.Helper()
	require.NoError(t, db.Exec(`INSERT INTO run_locks (key, host, pid) VALUES (?, ?, ?)`, key, host, pid).Error)
}

// dbPath is the file of the test's database.
func dbPath(t *testing.T, db *gorm.DB) string {
	t.Helper()
	var path string
	require.NoError(t, db.Raw(`SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path).Error)
	require.NotEmpty(t, path)
	return path
}

// A container restarted on the same hostname runs as pid 1 again and finds
// its dead predecessor's row naming pid 1 (its own pid now): the row is no
// lock, the dead predecessor's file lock went with its process.
func TestLockIsNotAPidRestartedContainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	st := sqlitestore.New(db, nil)
	host, err := os.Hostname()
	require.NoError(t, err)
	hold(t, db, "stripe/", host, os.Getpid())
	hold(t, db, "remote/", "another-host", 1)
	for _, key := range []string{"stripe/", "remote/"} {
		l, err := st.TryLock(ctx, key)
		require.NoError(t, err, "a row left by a holder that no longer holds the file lock is taken over: %s", key)
		require.NoError(t, l.Held(ctx))
		require.NoError(t, l.Release(ctx))
	}
	require.Empty(t, lockRows(t, db))
}

// holderEnv names the database a helper process locks (TestHelperHoldLock).
const holderEnv = "H19P_HOLD_LOCK_DB"

// TestHelperHoldLock is not a test: run by startHolder as another process,
// it takes the lock "stripe/" on the database named by holderEnv, says so on
// stdout and holds it until it is killed.
func TestHelperHoldLock(t *testing.T) {
	path := os.Getenv(holderEnv)
	if path == "" {
		t.Skip("helper process only")
	}
	db, err := dbopen.SQLite(path)
	require.NoError(t, err)
	_, err = sqlitestore.New(db, nil).TryLock(context.Background(), "stripe/")
	require.NoError(t, err)
	fmt.Println("held")
	time.Sleep(time.Hour)
}

// startHolder starts another process holding the lock "stripe/" on path.
func startHolder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$")
	cmd.Env = append(os.Environ(), holderEnv+"="+path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", line)
	return cmd
}

func TestLockHeldByAnotherProcessUntilItDies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	st := sqlitestore.New(db, nil)
	holder := startHolder(t, dbPath(t, db))
	_, err := st.TryLock(ctx, "stripe/")
	require.ErrorIs(t, err, store.ErrLocked, "a live holder in another process")
	other, err := st.TryLock(ctx, "stripe/acct_1")
	require.NoError(t, err, "another key is free")
	require.NoError(t, other.Release(ctx))
	host, _ := os.Hostname()
	require.Equal(t, []lockRow{{"stripe/", host, holder.Process.Pid}}, lockRows(t, db), "the row names the holder")

	// Killed, it cannot release anything: the OS does.
	require.NoError(t, holder.Process.Kill())
	_ = holder.Wait()
	l, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err, "a dead holder's lock is free")
	require.Equal(t, []lockRow{{"stripe/", host, os.Getpid()}}, lockRows(t, db))
	require.NoError(t, l.Release(ctx))
	require.Empty(t, lockRows(t, db))
}

// The lock file removed under a holder (by hand, or by a cleanup of the
// directory) lets another run lock a new file of the same name: the first
// holder's Held says it lost the lock.
func TestLockLostWithItsFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	st := sqlitestore.New(db, nil)
	l, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	files, err := filepath.Glob(dbPath(t, db) + ".lock-stripe_-*")
	require.NoError(t, err)
	require.Len(t, files, 1, "one lock file per key beside the database")
	require.NoError(t, os.Remove(files[0]))
	require.ErrorIs(t, l.Held(ctx), store.ErrLockLost)
	l2, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	require.ErrorIs(t, l.Held(ctx), store.ErrLockLost, "another holder locked the new file")
	require.NoError(t, l2.Held(ctx))
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l2.Held(ctx), "releasing the lost lock leaves the new holder's")
	require.NoError(t, l2.Release(ctx))
}

func TestLockReleaseLeavesAnotherHoldersRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	st := sqlitestore.New(db, nil)
	l, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	// Another process took the lock over meanwhile: releasing ours must
	// not delete their row.
	require.NoError(t, db.Exec(`UPDATE run_locks SET pid = ? WHERE key = ?`, os.Getppid(), "stripe/").Error)
	require.NoError(t, l.Release(ctx))
	host, _ := os.Hostname()
	require.Equal(t, []lockRow{{"stripe/", host, os.Getppid()}}, lockRows(t, db))
}

// Keys that differ only in characters a file name cannot hold never share
// a lock file.
func TestLockKeysNeverShareAFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlitestore.New(openDB(t), nil)
	a, err := st.TryLock(ctx, "stripe/acct:1")
	require.NoError(t, err)
	b, err := st.TryLock(ctx, "stripe/acct/1")
	require.NoError(t, err)
	require.NoError(t, a.Release(ctx))
	require.NoError(t, b.Release(ctx))
}

// An in-memory database has no directory to put a lock file in: TryLock
// says so rather than locking nothing.
func TestLockNeedsADatabaseFile(t *testing.T) {
	t.Parallel()
	db, err := dbopen.SQLite(":memory:")
	require.NoError(t, err)
	_, err = models.Migrate(context.Background(), db)
	require.NoError(t, err)
	_, err = sqlitestore.New(db, nil).TryLock(context.Background(), "stripe/")
	require.ErrorContains(t, err, "database.sqlite_path")
	require.NotErrorIs(t, err, store.ErrLocked)
}

// TestCheckSchemaRefuses is the embedded store's half of the schema check
// (issue 18): pragma table_info and index_list, one line naming the problem.
func TestCheckSchemaRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, sql, want string
	}{
		{"missing column", `DROP VIEW payments; ALTER TABLE orders DROP COLUMN refunded_minor`,
			"schema: column payments.amount_refunded not found in table orders; map it with schema.payments.columns.amount_refunded or add it"},
		{"unmapped state", `INSERT INTO orders (psp, ext_id, status, "Total", currency_code, psp_updated_at) VALUES ('stripe', 'pi_1', 'on_hold', 1, 'gbp', '2026-01-01')`,
			`schema: state "on_hold" in orders.status is not mapped`},
		{"wrong type", `ALTER TABLE inbox ADD COLUMN recovered_text TEXT`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := pgtest.NewSQLiteMapped(t).DB
			require.NoError(t, sqlitestore.CheckSchema(context.Background(), db))
			require.NoError(t, db.Exec(c.sql).Error)
			err := sqlitestore.CheckSchema(context.Background(), db)
			if c.want == "" {
				require.NoError(t, err, "an extra column is no problem")
				return
			}
			var se *store.SchemaError
			require.ErrorAs(t, err, &se)
			require.Contains(t, se.Error(), c.want)
			require.NotContains(t, se.Error(), "\n")
		})
	}
}
