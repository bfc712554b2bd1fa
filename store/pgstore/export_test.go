package pgstore

// FewRowsStatement is a statement that finds a batch's few rows among a
// run's many, with arguments of the right kinds in the order it takes them.
type FewRowsStatement struct {
	Name  string
	Table string
	SQL   string
	Args  []any
}

// FewRowsStatements are LoadCarry's, SaveCarry's DELETE and DeleteItems'.
var FewRowsStatements = []FewRowsStatement{
	{"LoadCarry", "reconciler_carry", loadCarrySQL, []any{1, `["pi_1","pi_2"]`}},
	{"DropCarry", "reconciler_carry", dropCarrySQL, []any{1, `["pi_1","pi_2"]`}},
	{"DeleteItems", "drift_items", deleteItemsSQL, []any{1, "stripe", `["pi_1","pi_2"]`}},
}

// The store suite's batches are small: every one of them COPYs its events
// (copyEvents), and the suite's recorded events make the COPY fall back.
func init() { copyEventsMin = 1 }
