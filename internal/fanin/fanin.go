// Package fanin reads several lists at once and hands what they read to
// one goroutine: a provider's list is read through its cursor, one request
// an answer's time, so stretches of a window listed at once use what the
// pacing allows where one list cannot.
package fanin

import (
	"context"
	"errors"
	"sync"
)

// Run starts produce once for each part, at once, and calls handle with
// each item they send, from the caller's goroutine, in the order the items
// arrive, until every produce has returned. A send waits until handle has
// taken the items sent before it but one per part, so memory stays at a
// few items a part.
//
// The first error ends the rest (their context is canceled) and is
// returned: handle's first (unless the cancellation after a produce's
// error caused it), else the first produce's that was not caused by the
// cancellation, else the caller's context's error. After an error no
// item is handed on.
func Run[P, T any](ctx context.Context, parts []P, produce func(ctx context.Context, part P, send func(T) error) error, handle func(ctx context.Context, item T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan T, len(parts))
	send := func(it T) error {
		select {
		case items <- it:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		produceErr error
	)
	for _, part := range parts {
		wg.Go(func() {
			if err := produce(ctx, part, send); err != nil {
				mu.Lock()
				if produceErr == nil && ctx.Err() == nil {
					produceErr = err
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	go func() { wg.Wait(); close(items) }()
	var handleErr error
	for it := range items { // until every produce has returned
		if handleErr == nil && ctx.Err() == nil {
			if handleErr = handle(ctx, it); handleErr != nil {
				cancel()
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	switch {
	case handleErr != nil && !(produceErr != nil && errors.Is(handleErr, context.Canceled)):
		// (A handle that failed because a produce's error canceled it
		// returns that error, not its own.)
		return handleErr
	case produceErr != nil:
		return produceErr
	}
	return ctx.Err()
}
