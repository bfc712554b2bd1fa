package pgstore

import (
	"context"
	"strings"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store/internal/sqlbase"
)

// CheckSchema checks the application's tables of db's mapping
// (models.AppSchemaOf) against the live schema: pg_attribute for the
// columns and their types, pg_index for the unique keys, the table found as
// the job's statements find it (to_regclass: the search_path for an
// unqualified name). See sqlbase.CheckSchema.
func CheckSchema(ctx context.Context, db *gorm.DB) error {
	return sqlbase.CheckSchema(ctx, db, models.AppSchemaOf(db), catalog{})
}

type catalog struct{}

func (catalog) Columns(ctx context.Context, db *gorm.DB, t models.AppTable) (map[string]string, error) {
	// pg_attribute, not information_schema.columns: the view's joins cost
	// a fresh connection 24 ms a table, and every command checks its
	// tables when it opens the database (issue 16). The names are
	// information_schema's data_type ("timestamp with time zone",
	// "character varying"); a domain is its base type, as there; a type
	// of an extension or the user's is its own name, unqualified
	// (citext), as information_schema's udt_name was; an array of a
	// built-in type is "text[]" (information_schema's "ARRAY", "_text").
	var rows []struct{ ColumnName, DataType string }
	err := db.Raw(`SELECT a.attname AS column_name,
			CASE WHEN b.typnamespace = 'pg_catalog'::regnamespace THEN format_type(b.oid, NULL) ELSE b.typname END AS data_type
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
		WHERE a.attrelid = to_regclass(?) AND a.attnum > 0 AND NOT a.attisdropped`, t.Ident()).Scan(&rows).Error
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.ColumnName] = strings.ToLower(r.DataType)
	}
	return out, nil
}

func (catalog) Uniques(ctx context.Context, db *gorm.DB, t models.AppTable) ([][]string, error) {
	var rows []struct{ Cols string }
	err := db.Raw(`SELECT string_agg(a.attname, ',' ORDER BY a.attname) AS cols
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = to_regclass(?) AND i.indisunique AND i.indpred IS NULL
		GROUP BY i.indexrelid`, t.Ident()).Scan(&rows).Error
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = strings.Split(r.Cols, ",")
	}
	return out, err
}

func (catalog) Kind(typ string, k models.ColumnKind) (bool, string) {
	want := map[models.ColumnKind][]string{
		models.KindText:    {"text", "character varying", "character", "citext"},
		models.KindInteger: {"bigint", "integer", "smallint"},
		models.KindTime:    {"timestamp with time zone", "timestamp without time zone"},
		models.KindJSON:    {"jsonb", "json"},
		models.KindBool:    {"boolean"},
	}[k]
	for _, w := range want {
		if typ == w {
			return true, ""
		}
	}
	return false, strings.Join(want, ", ")
}
