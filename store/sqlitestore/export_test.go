package sqlitestore

import "github.com/reconciler/reconciler/models"

// BatchStatement is a batch statement with arguments of the right kinds,
// in the order it takes them.
type BatchStatement struct {
	Name string
	SQL  string
	Args []any
}

// BatchStatements are every statement of a batch transaction, in the
// contract's names (models.DefaultAppSchema).
var BatchStatements = expand([]BatchStatement{
	{"LoadPayments", loadPaymentsSQL, []any{"stripe", `["pi_1"]`}},
	{"InsertPayments", insertPaymentsSQL, []any{"stripe", "", nil, nil, `[]`}},
	{"ApplySteps", applyStepsSQL, []any{`[]`, nil, "stripe"}},
	{"ApplyStepsSettles", applyStepsSettlesSQL, []any{`[]`, nil, "stripe"}},
	{"RaiseRefunds", raiseRefundsSQL, []any{`[]`, nil, "stripe"}},
	{"RecordSettlements", recordSettlementsSQL, []any{`[]`, nil, "stripe"}},
	{"RecordCaptured", recordCapturedSQL, []any{`[]`, nil, "stripe"}},
	{"LoadCarry", loadCarrySQL, []any{`["pi_1"]`, 1}},
	{"DropCarry", dropCarrySQL, []any{`["pi_1"]`, 1}},
	{"SaveCarry", saveCarrySQL, []any{1, `[]`}},
	{"DeleteItems", deleteItemsSQL, []any{1, "stripe", `["pi_1"]`}},
	{"InsertItems", insertItemsSQL, []any{1, "stripe", nil, `[]`}},
	{"ReplaceItems", replaceItemsSQL, []any{`[]`, nil, 1, "stripe"}},
	{"InsertEvents", insertEventsSQL, []any{"stripe", nil, 1, `[]`}},
	{"MissingEvents", missingEventsSQL, []any{`["evt_1"]`, "stripe"}},
})

func expand(sts []BatchStatement) []BatchStatement {
	for i := range sts {
		sts[i].SQL = models.DefaultAppSchema().SQL(sts[i].SQL)
	}
	return sts
}
