package sqlitestore_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/store/sqlitestore"
)

// Every batch statement walks its JSON argument once and finds each row it
// touches by a unique key: none scans a table, so a batch costs the same
// however many rows the database holds. (UPDATE … FROM json_each(?)
// scanned the provider's rows and, for each, the whole argument: the demo
// grew with the square of its payments.)
func TestBatchStatementsUseTheIndex(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	for _, st := range sqlitestore.BatchStatements {
		rows, err := db.Raw("EXPLAIN QUERY PLAN "+st.SQL, st.Args...).Rows()
		require.NoError(t, err, st.Name)
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail), st.Name)
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Err(), st.Name)
		require.NoError(t, rows.Close())
		t.Logf("%s:\n  %s", st.Name, strings.Join(plan, "\n  "))
		for _, step := range plan {
			switch {
			case strings.HasPrefix(step, "SCAN "):
				require.Regexp(t, `^SCAN (json_each|v)( |$)`, step, "%s scans a table:\n%s", st.Name, strings.Join(plan, "\n"))
			case strings.HasPrefix(step, "SEARCH "):
				require.Regexp(t, `\((provider|source|run_id)=\? AND (provider_id|event_id)=\?\)$`, step,
					"%s searches without the row's key:\n%s", st.Name, strings.Join(plan, "\n"))
			}
		}
	}
}
