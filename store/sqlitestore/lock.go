package sqlitestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/store"
)

// lock is a run lock of the embedded store. What decides is an OS lock on a
// file beside the database (flock on Unix, LockFileEx on Windows): the OS
// releases it when its holder's process ends, however it ends, so a holder
// that died never locks the next run out and nothing trusts a pid (in a
// container every run is pid 1, and a restarted container on the same
// hostname would mistake its dead predecessor's row for itself). The
// run_locks row only says who holds the lock (host, pid, acquired_at), for
// operators and for Held.
type lock struct {
	db   *gorm.DB
	key  string
	file *flock.Flock
	host string
	pid  int
	at   string // acquired_at as this holder wrote it
}

// TryLock implements store.Store: it takes the OS lock on the key's lock
// file, <database file>.lock-<key>, without waiting, and records itself in
// the key's run_locks row, replacing whatever a former holder left there.
// The lock file is created beside the database file, so the database must be
// a file in a directory the process can write to (not ":memory:"); it is
// never removed (removing it would let two processes lock two different
// files of one name). The embedded store is for one machine: OS file locks
// are not reliable across hosts sharing the file over a network filesystem,
// and that case is not supported.
func (s *Store) TryLock(ctx context.Context, key string) (store.Lock, error) {
	path, err := s.lockFile(ctx, key)
	if err != nil {
		return nil, err
	}
	f := flock.New(path, flock.SetPermissions(0o600))
	ok, err := f.TryLock()
	if err != nil {
		return nil, fmt.Errorf("take run lock: lock file %s (created beside the database file, whose directory must be writable): %w", path, err)
	}
	if !ok {
		return nil, store.ErrLocked
	}
	host, _ := os.Hostname()
	l := &lock{db: s.DB, key: key, file: f, host: host, pid: os.Getpid(),
		at: time.Now().UTC().Format("2006-01-02 15:04:05.000000000+00:00")}
	err = s.DB.WithContext(ctx).Exec(`INSERT INTO run_locks (key, host, pid, acquired_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET host = excluded.host, pid = excluded.pid, acquired_at = excluded.acquired_at`,
		key, l.host, l.pid, l.at).Error
	if err != nil {
		return nil, errors.Join(fmt.Errorf("take run lock: record its holder: %w", err), f.Unlock())
	}
	return l, nil
}

// lockFile is the path of key's lock file: the database file's path, then
// ".lock-", the key with every character that is not a letter, digit, '-'
// or '.' as '_', and a hash of the key (so that keys differing only in
// those characters never share a file).
func (s *Store) lockFile(ctx context.Context, key string) (string, error) {
	var db []string
	if err := s.DB.WithContext(ctx).Raw(`SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&db).Error; err != nil {
		return "", fmt.Errorf("take run lock: find the database file: %w", err)
	}
	if len(db) == 0 || db[0] == "" {
		return "", errors.New("take run lock: the embedded store's run lock is a file beside the database file, and this database has none (it is in memory or temporary): open a database file (database.sqlite_path)")
	}
	name := strings.Map(func(r rune) rune {
		if r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, key)
	if len(name) > 64 {
		name = name[:64]
	}
	sum := sha256.Sum256([]byte(key))
	return db[0] + ".lock-" + name + "-" + hex.EncodeToString(sum[:4]), nil
}

// Release implements store.Lock: it deletes the row if it still names this
// holder, then gives the OS lock up.
func (l *lock) Release(ctx context.Context) error {
	err := l.db.WithContext(ctx).Exec(`DELETE FROM run_locks WHERE key = ? AND host = ? AND pid = ? AND acquired_at = ?`,
		l.key, l.host, l.pid, l.at).Error
	if err != nil {
		err = fmt.Errorf("release run lock: delete its row: %w", err)
	}
	if uerr := l.file.Unlock(); uerr != nil {
		err = errors.Join(err, fmt.Errorf("release run lock: unlock %s: %w", l.file.Path(), uerr))
	}
	return err
}

// Held implements store.Lock. The OS lock cannot be taken from a live
// holder, but its file can be removed or replaced under it (and another
// process then locks the new file), and its row can be overwritten: the
// lock is lost when the file at the lock's path is no longer the one this
// holder locked, or the row no longer names this holder.
func (l *lock) Held(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !l.file.Locked() {
		return fmt.Errorf("%w: it was released", store.ErrLockLost)
	}
	mine, err := l.file.Stat()
	if err != nil {
		return fmt.Errorf("read run lock file: %w", err)
	}
	now, err := os.Stat(l.file.Path())
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: its lock file %s was removed", store.ErrLockLost, l.file.Path())
	}
	if err != nil {
		return fmt.Errorf("read run lock file: %w", err)
	}
	if !os.SameFile(mine, now) {
		return fmt.Errorf("%w: its lock file %s was replaced", store.ErrLockLost, l.file.Path())
	}
	var n int64
	if err := l.db.WithContext(ctx).Raw(`SELECT count(*) FROM run_locks WHERE key = ? AND host = ? AND pid = ? AND acquired_at = ?`,
		l.key, l.host, l.pid, l.at).Scan(&n).Error; err != nil {
		return fmt.Errorf("read run lock: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: its row no longer names this process", store.ErrLockLost)
	}
	return nil
}
