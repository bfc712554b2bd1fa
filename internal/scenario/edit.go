package scenario

import (
	"context"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
)

// payments is the payments table for a person's or a bug's edit, in the
// application's names (models.AppSchemaOf db: the contract's, or a mapped
// install's), with where (in the contract's column names: provider,
// provider_id, account) and cols (column → value; a state is the job's and
// written as the application's value) translated.
func editPayments(ctx context.Context, db *gorm.DB, where string, args []any, cols map[string]any) *gorm.DB {
	m := models.AppSchemaOf(db)
	set := make(map[string]any, len(cols))
	for c, v := range cols {
		if c == "state" {
			v = m.AppState(models.State(v.(string)))
		}
		set[m.Payments.Columns[c]] = v
	}
	for _, c := range []string{"provider_id", "provider", "account"} { // longest first: provider_id before provider
		where = replaceWord(where, c, "{"+c+"}")
	}
	return db.WithContext(ctx).Table(m.SQL("{payments} AS p")).Where(m.SQL(where), args...).Updates(set)
}

// replaceWord replaces the column name w in s where it stands as a word.
func replaceWord(s, w, by string) string {
	out := ""
	for {
		i := indexWord(s, w)
		if i < 0 {
			return out + s
		}
		out += s[:i] + by
		s = s[i+len(w):]
	}
}

func indexWord(s, w string) int {
	isWord := func(b byte) bool { return b == '_' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '{' }
	for i := 0; i+len(w) <= len(s); i++ {
		if s[i:i+len(w)] == w && (i == 0 || !isWord(s[i-1])) && (i+len(w) == len(s) || !isWord(s[i+len(w)])) {
			return i
		}
	}
	return -1
}
