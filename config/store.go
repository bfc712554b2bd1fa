package config

import (
	"net/url"
	"regexp"
	"strings"
)

// dbSource is how the store was configured. The embedded SQLite file is
// the store only when Database.Embedded says so or no database is
// configured at all; a configured URL that is empty or not PostgreSQL's
// is an error, never a fall-back to a local file.
type dbSource struct {
	// urlFrom names where a database URL was configured: the file's line
	// ("c.yaml line 3") or the variable (DATABASE_URL). "": nowhere.
	urlFrom string
	urlVar  bool // urlFrom is a variable
	// unsetRef is the file's url value when it was only ${VAR:-}
	// references to unset variables: written to allow no database.
	unsetRef string
}

// EmbeddedStore reports whether the embedded SQLite file is the store and
// why, for the log line that says so. Call it on a validated Config.
func (c Config) EmbeddedStore() (reason string, ok bool) {
	switch {
	case c.Database.Embedded:
		return "database.embedded is true", true
	case c.Database.URL != "":
		return "", false
	case c.db.unsetRef != "":
		return "no database configured (database.url is " + c.db.unsetRef + ", unset)", true
	}
	return "no database configured", true
}

// dsnKey matches the start of a PostgreSQL key=value DSN.
var dsnKey = regexp.MustCompile(`^\s*[a-z_]+\s*=`)

// IsPostgresURL reports whether u is a PostgreSQL URL (postgres:// or
// postgresql://) or a key=value DSN (host=… dbname=…).
func IsPostgresURL(u string) bool {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		_, err := url.Parse(u)
		return err == nil
	}
	return !strings.Contains(u, "://") && dsnKey.MatchString(u)
}

// checkStore refuses a store that would be picked by guessing. No message
// prints the URL: it may hold a password.
func (c Config) checkStore() error {
	d, from := c.Database, c.db.urlFrom
	key, where := "database.url", ""
	switch {
	case from == "":
	case c.db.urlVar:
		key = from
	default:
		where = " (" + from + ")"
		if src, ok := c.sources["database.url"]; ok {
			where = " (from " + src + ", " + from + ")"
		}
	}
	const pg = "postgres://user:password@host:5432/db or host=… dbname=…"
	switch {
	case d.Embedded && from != "":
		return &Error{Key: "database.embedded", Msg: "is true, and a database URL is configured too (" + from + ")",
			Hint: "remove one: embedded: true picks the SQLite file, a URL PostgreSQL"}
	case from != "" && d.URL == "":
		msg := "is empty" + where
		if key != "database.url" {
			msg = "is set but empty"
		}
		return &Error{Key: key, Msg: msg, Hint: "give a PostgreSQL URL or DSN (" + pg + "); for the embedded SQLite file configure no database at all, or set database.embedded: true"}
	case d.URL != "" && !IsPostgresURL(d.URL):
		return &Error{Key: key, Msg: "is not a PostgreSQL URL or DSN" + where, Hint: "write " + pg}
	case d.URL == "" && d.SQLitePath == "":
		return &Error{Key: "database.sqlite_path", Msg: "is empty and no database URL is set", Hint: "set DATABASE_URL, or name a file for the embedded store"}
	}
	return nil
}
