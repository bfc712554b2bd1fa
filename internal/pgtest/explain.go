package pgtest

import (
	"fmt"
	"strings"
	"testing"

	"gorm.io/gorm"
)

// Explain returns PostgreSQL's plan for sql (its parameters written $1,
// $2, …) with args, as a statement the job prepares gets it: prepared in
// tx under plan_cache_mode mode (force_custom_plan: planned with args;
// force_generic_plan: planned without), then EXPLAIN EXECUTE. tx is left
// open: the caller rolls it back.
func Explain(t testing.TB, tx *gorm.DB, mode, sql string, args ...any) string {
	t.Helper()
	if err := tx.Exec(`SET LOCAL plan_cache_mode = ` + mode).Error; err != nil {
		t.Fatalf("plan_cache_mode: %v", err)
	}
	if err := tx.Exec(`PREPARE plan_probe AS ` + sql).Error; err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer tx.Exec(`DEALLOCATE plan_probe`) // a session's, not the transaction's
	ps := make([]string, len(args))
	for i, a := range args {
		ps[i] = fmt.Sprintf("'%v'", a)
	}
	rows, err := tx.Raw(`EXPLAIN EXECUTE plan_probe(` + strings.Join(ps, ", ") + `)`).Rows()
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatalf("explain: %v", err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("explain: %v", err)
	}
	return strings.Join(lines, "\n")
}
