package store

// SchemaError is a live application table that does not match the
// configured mapping (a missing table, column or unique key, a column of
// the wrong type, a state value the mapping does not name): one line naming
// it and the fix. Nothing has been read from a provider or written when a
// command sees it; the command exits 2.
type SchemaError struct{ Msg string }

func (e *SchemaError) Error() string { return e.Msg }
