package serve

import "github.com/reconciler/reconciler/models"

// RunEntry is one run as GET /runs lists it: the run's summary without its
// items, with their count and where they are listed. The command line's
// `reconciler runs list -o json` prints the same entries.
type RunEntry = runEntry

// ListEntry is run r as GET /runs lists it.
func ListEntry(r models.Run) RunEntry { return listEntry(r) }
