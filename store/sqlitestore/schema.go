package sqlitestore

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/internal/sqlbase"
)

// CheckSchema checks the application's tables of db's mapping
// (models.AppSchemaOf) against the live schema: pragma table_info for the
// columns and their declared types, pragma index_list and index_info for
// the unique keys. See sqlbase.CheckSchema.
func CheckSchema(ctx context.Context, db *gorm.DB) error {
	s := models.AppSchemaOf(db)
	for _, t := range []models.AppTable{s.Payments, s.Events} {
		if t.Schema != "" {
			return &store.SchemaError{Msg: fmt.Sprintf("schema: table %s: the embedded store has no schemas; map the table without one (schema.app_schema and a qualified table name are for PostgreSQL)", t.Qualified())}
		}
	}
	return sqlbase.CheckSchema(ctx, db, s, catalog{})
}

type catalog struct{}

func (catalog) Columns(ctx context.Context, db *gorm.DB, t models.AppTable) (map[string]string, error) {
	var rows []struct {
		Name string
		Type string
	}
	if err := db.Raw(`SELECT name, type FROM pragma_table_info(?)`, t.Name).Scan(&rows).Error; err != nil || len(rows) == 0 {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.Name] = strings.ToLower(r.Type)
	}
	return out, nil
}

func (catalog) Uniques(ctx context.Context, db *gorm.DB, t models.AppTable) ([][]string, error) {
	var idx []struct {
		Name    string
		Unique  bool
		Partial bool
	}
	if err := db.Raw(`SELECT name, "unique", partial FROM pragma_index_list(?)`, t.Name).Scan(&idx).Error; err != nil {
		return nil, err
	}
	var out [][]string
	for _, ix := range idx {
		if !ix.Unique || ix.Partial {
			continue
		}
		var cols []string
		if err := db.Raw(`SELECT name FROM pragma_index_info(?)`, ix.Name).Scan(&cols).Error; err != nil {
			return nil, err
		}
		out = append(out, cols)
	}
	return out, nil
}

// Kind follows SQLite's type affinity rules on the declared type: a
// time is stored as text (the job's normalised form), a payload as text.
func (catalog) Kind(typ string, k models.ColumnKind) (bool, string) {
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(typ, s) {
				return true
			}
		}
		return false
	}
	switch k {
	case models.KindText:
		return has("char", "clob", "text") || typ == "", "TEXT"
	case models.KindInteger:
		return has("int"), "INTEGER"
	case models.KindTime:
		return has("date", "time", "text"), "DATETIME or TEXT"
	case models.KindJSON:
		return has("json", "text", "blob", "clob") || typ == "", "TEXT or JSON"
	case models.KindBool:
		return has("bool", "int"), "BOOLEAN or INTEGER"
	}
	return false, string(k)
}
