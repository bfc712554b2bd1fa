package reconcile

import "time"

// The engine's defaults: the one source the configuration's defaults
// (config.Default) and Options.defaults both read.
const (
	DefaultWindow     = 24 * time.Hour
	DefaultOverlap    = time.Hour
	DefaultBatchSize  = 1000
	DefaultStuckAfter = 72 * time.Hour
	DefaultStuckLimit = 100
)
