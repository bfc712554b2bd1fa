package store

import (
	"context"
	"sync/atomic"
)

type tripsKey struct{}

// CountTrips returns a context under which every statement a store sends
// through InTx (BEGIN and COMMIT included) is also counted in n, so that a
// run sharing its store with concurrent runs counts only its own.
func CountTrips(ctx context.Context, n *atomic.Int64) context.Context {
	return context.WithValue(ctx, tripsKey{}, n)
}

// TripCounter is the counter CountTrips put in ctx, or nil.
func TripCounter(ctx context.Context) *atomic.Int64 {
	n, _ := ctx.Value(tripsKey{}).(*atomic.Int64)
	return n
}
