package pgstore

import (
	"context"
	"strings"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store/internal/sqlbase"
)

// CheckSchema checks the application's tables of db's mapping
// (models.AppSchemaOf) against the live schema: information_schema for the
// columns and their types, pg_index for the unique keys, the table found as
// the job's statements find it (to_regclass: the search_path for an
// unqualified name). See sqlbase.CheckSchema.
func CheckSchema(ctx context.Context, db *gorm.DB) error {
	return sqlbase.CheckSchema(ctx, db, models.AppSchemaOf(db), catalog{})
}

type catalog struct{}

func (catalog) Columns(ctx context.Context, db *gorm.DB, t models.AppTable) (map[string]string, error) {
	var rows []struct{ ColumnName, DataType, UdtName string }
	err := db.Raw(`SELECT c.column_name, c.data_type, c.udt_name
		FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace
		JOIN information_schema.columns c ON c.table_schema = n.nspname AND c.table_name = r.relname
		WHERE r.oid = to_regclass(?)`, t.Ident()).Scan(&rows).Error
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		typ := r.DataType
		if typ == "USER-DEFINED" || typ == "ARRAY" {
			typ = r.UdtName
		}
		out[r.ColumnName] = strings.ToLower(typ)
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
