package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/store/pgstore"
)

// TestColumnsReadAsInformationSchemaDoes: the schema check's columns, read
// from pg_attribute, have the types information_schema.columns gives
// (data_type, or udt_name for a type of an extension or the user's), for
// every kind of column a mapped table may have, domains and a type in a
// schema off the search_path included; arrays of built-in types read as
// "text[]" where information_schema says "ARRAY".
func TestColumnsReadAsInformationSchemaDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	cols := []string{"a text", "b varchar(20)", "c char(3)", "d bigint", "e integer", "f smallint",
		"g timestamptz", "h timestamp", "i jsonb", "j json", "k boolean", "l numeric(10,2)", "m money_cents",
		"n state_text", "o mood", "p text[]", "q uuid", `"Odd Name" text`}
	require.NoError(t, db.Exec(`CREATE DOMAIN money_cents AS bigint CHECK (VALUE >= 0)`).Error)
	require.NoError(t, db.Exec(`CREATE DOMAIN state_text AS varchar(30)`).Error)
	require.NoError(t, db.Exec(`CREATE TYPE mood AS ENUM ('paid', 'unpaid')`).Error)
	// A type in a schema off the search_path (as an extension's may be):
	// its name, unqualified. (Not an extension: one is the database's,
	// and the tests share it.)
	var off string
	require.NoError(t, db.Raw(`SELECT current_schema() || '_off'`).Scan(&off).Error)
	require.NoError(t, db.Exec(`CREATE SCHEMA "`+off+`"`).Error)
	t.Cleanup(func() { db.Exec(`DROP SCHEMA "` + off + `" CASCADE`) })
	require.NoError(t, db.Exec(`CREATE TYPE "`+off+`".ci AS ENUM ('x')`).Error)
	cols = append(cols, `r "`+off+`".ci`)
	require.NoError(t, db.Exec(`CREATE TABLE kinds_of_columns (`+strings.Join(cols, ", ")+`)`).Error)
	require.NoError(t, db.Exec(`ALTER TABLE kinds_of_columns DROP COLUMN q`).Error)

	got, err := pgstore.Columns(ctx, db.DB, "kinds_of_columns")
	require.NoError(t, err)
	var rows []struct{ ColumnName, DataType, UdtName string }
	require.NoError(t, db.Raw(`SELECT column_name, data_type, udt_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'kinds_of_columns'`).Scan(&rows).Error)
	require.Len(t, got, len(rows), "a dropped column is not a column")
	for _, r := range rows {
		want := r.DataType
		switch want {
		case "USER-DEFINED":
			want = r.UdtName
		case "ARRAY":
			want = strings.TrimPrefix(r.UdtName, "_") + "[]"
		}
		require.Equal(t, strings.ToLower(want), got[r.ColumnName], "column %s", r.ColumnName)
	}
}
