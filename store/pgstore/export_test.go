package pgstore

import "github.com/reconciler/reconciler/models"

// FewRowsStatement is a statement that finds a batch's few rows among a
// run's many, with arguments of the right kinds in the order it takes them.
type FewRowsStatement struct {
	Name  string
	Table string
	SQL   string
	Args  []any
	Probe string // what its plan shows when it probes the index for each id
}

// FewRowsStatements are LoadCarry's, SaveCarry's DELETE, DeleteItems' and
// the question of which events are recorded (InsertEvents, MissingEvents).
var FewRowsStatements = []FewRowsStatement{
	{"LoadCarry", "reconciler_carry", loadCarrySQL, []any{1, `["pi_1","pi_2"]`}, "= ANY"},
	{"DropCarry", "reconciler_carry", dropCarrySQL, []any{1, `["pi_1","pi_2"]`}, "= ANY"},
	{"DeleteItems", "drift_items", deleteItemsSQL, []any{1, "stripe", `["pi_1","pi_2"]`}, "= ANY"},
	{"MissingEvents", "webhook_events", models.DefaultAppSchema().SQL(`SELECT v.id ` + missingEventsSQL), []any{`["evt_1","evt_2"]`, "stripe"},
		"Index Only Scan using"},
}

// The store suite's batches are small: every one of them COPYs its events
// (copyEvents), and the suite's recorded events make the COPY fall back.
func init() { copyEventsMin = 1 }
