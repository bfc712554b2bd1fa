package pgstore

import (
	"context"
	"sync"

	"github.com/reconciler/reconciler/store"
)

// Stripe's events are 1.5 to 3.5 kB of JSON (stripe-mock's fixtures: a
// payment_intent event about 1.5 kB, a charge's about 3.4 kB;
// docs/providers/stripe.md). A webhook_events row over about 2 kB has its
// payload compressed by TOAST, with default_toast_compression's method
// unless the column names one. With lz4 instead of pglz, the built-in
// default, 48,000 such events (a third charges) COPYed in 3.22 s instead
// of 3.62 (medians of five alternated rounds; docs/benchmarks.md,
// "Stripe-sized payloads"); pglz packs them a little tighter (2,182 bytes a
// charge against 2,504). So when the server offers lz4 and nobody chose a
// method (pg_settings' source for default_toast_compression is "default":
// not postgresql.conf, ALTER DATABASE or ROLE, nor the connection's
// options), the transactions that record events set it to lz4 for
// themselves (set_config, is_local): no DDL, no lock on the application's
// table, the application's own rows and sessions untouched. Each value
// records its own method, so every reader reads both kinds. An operator
// who wants pglz says so in any of those places (docs/operations.md,
// "Large event payloads").

// bigPayload is the payload size from which a row may be TOASTed (the
// row's TOAST threshold is about 2 kB; the other columns add little):
// below it the method is never used, and the INSERT path skips the
// round trip that sets it (the COPY's costs none: its first statement
// sets it).
const bigPayload = 1800

// toastChoice is whether the store's event transactions use lz4, asked
// of the server once (Store.lz4).
type toastChoice struct {
	mu     sync.Mutex
	asked  bool
	useLZ4 bool
}

// toastQuery says whether lz4 is on offer and nobody chose a method. No row
// (PostgreSQL before 14, which has no default_toast_compression) is false.
const toastQuery = `SELECT coalesce((SELECT 'lz4' = ANY(enumvals) AND source = 'default'
	FROM pg_settings WHERE name = 'default_toast_compression'), false)`

// lz4 reports whether the store's event transactions set lz4, asking the
// server the first time it can (outside any transaction: a failed question
// there would abort the batch). A failed question is asked again next time;
// meanwhile the server's own method is used.
func (s *Store) lz4(ctx context.Context) bool {
	s.toast.mu.Lock()
	defer s.toast.mu.Unlock()
	if !s.toast.asked {
		var ok bool
		if err := s.DB.WithContext(ctx).Raw(toastQuery).Row().Scan(&ok); err == nil {
			s.toast.asked, s.toast.useLZ4 = true, ok
		}
	}
	return s.toast.useLZ4
}

// setLZ4 is the select-list item that sets lz4 for the rest of the
// transaction; its value is "lz4".
const setLZ4 = `set_config('default_toast_compression', 'lz4', true)`

// compressLZ4 sets lz4 for the rest of the transaction when the store
// uses it and some payload of rows is large enough to be compressed: one
// statement, for the INSERT path (the COPY's asks it with its timestamp).
func (t tx) compressLZ4(rows []store.Event) error {
	if !t.lz4 {
		return nil
	}
	for _, r := range rows {
		if len(r.Payload) >= bigPayload {
			return t.c.Exec(`SELECT ` + setLZ4)
		}
	}
	return nil
}
