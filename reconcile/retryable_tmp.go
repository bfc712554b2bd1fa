package reconcile

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Retryable is a temporary shim until internal/webhooksim moves to the
// store's error translation; it is removed with that change.
func Retryable(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40P01" || pg.Code == "40001")
}
