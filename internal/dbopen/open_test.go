package dbopen

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A command that only reads never creates the embedded store's file; the
// others create it and say, in their log line, which file and why.
func TestOpenEmbedded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "reconciler.db")
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	_, err := Open(ctx, Params{SQLitePath: path, MustExist: true, Log: log})
	if !errors.Is(err, ErrNoEmbeddedStore) {
		t.Fatalf("MustExist on a missing file: %v, want ErrNoEmbeddedStore", err)
	}
	if want := "no database: the embedded store " + path + " does not exist; set DATABASE_URL or run reconciler migrate or run first"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("MustExist created %v", entries)
	}
	if logs.Len() != 0 {
		t.Errorf("a refused open logged %q", logs.String())
	}

	db, err := Open(ctx, Params{SQLitePath: path, Reason: "database.embedded is true", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	_ = sqlDB.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Open without MustExist did not create the file: %v", err)
	}
	line := strings.SplitN(logs.String(), "\n", 2)[0]
	for _, want := range []string{`msg="using the embedded SQLite store"`, "path=" + path, `reason="database.embedded is true"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %s", line, want)
		}
	}

	db, err = Open(ctx, Params{SQLitePath: path, MustExist: true})
	if err != nil {
		t.Fatalf("MustExist on an existing file: %v", err)
	}
	sqlDB, _ = db.DB()
	_ = sqlDB.Close()
}

// schema.own_schema goes first on the search_path, before the DSN's own or
// PostgreSQL's default, in either DSN form.
func TestWithOwnSchema(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		{"postgres://u@h/db", `postgres://u@h/db?search_path=recon%2C+%22%24user%22%2C+public`},
		{"postgres://u@h/db?search_path=app&sslmode=disable", `postgres://u@h/db?search_path=recon%2C+app&sslmode=disable`},
		{"host=h dbname=db", `host=h dbname=db search_path='recon, "$user", public'`},
	} {
		got, err := withOwnSchema(c.dsn, "recon")
		if err != nil || got != c.want {
			t.Errorf("withOwnSchema(%q) = %q, %v; want %q", c.dsn, got, err, c.want)
		}
	}
	if got, _ := withOwnSchema("postgres://u@h/db", ""); got != "postgres://u@h/db" {
		t.Errorf("no own schema changes the DSN: %q", got)
	}
}
