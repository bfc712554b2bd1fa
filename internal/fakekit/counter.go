// Package fakekit holds what the project's fake provider servers share:
// serving on loopback, fault injection, request counting, the (created,
// index) order of their collections, the facts' state codes and the
// realistic customers they render. Each fake keeps its provider's wire
// format (ids, JSON, errors, paging) to itself.
package fakekit

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Counter counts a fake server's requests: in all, by response status and
// by path pattern. The zero value is ready; it is safe for concurrent use.
type Counter struct {
	total     atomic.Int64
	mu        sync.Mutex
	byStatus  map[int]int64
	byPattern map[string]int64
}

// Received counts a request as it arrives.
func (c *Counter) Received() { c.total.Add(1) }

// Answered counts the status a request got and the pattern it matched.
func (c *Counter) Answered(status int, pattern string) {
	c.mu.Lock()
	if c.byStatus == nil {
		c.byStatus, c.byPattern = map[int]int64{}, map[string]int64{}
	}
	c.byStatus[status]++
	c.byPattern[pattern]++
	c.mu.Unlock()
}

// Requests returns the number of requests received.
func (c *Counter) Requests() int64 { return c.total.Load() }

// ByStatus returns a copy of the counts per response status.
func (c *Counter) ByStatus() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byStatus == nil {
		return map[int]int64{}
	}
	return maps.Clone(c.byStatus)
}

// ByPattern returns a copy of the counts per path pattern.
func (c *Counter) ByPattern() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byPattern == nil {
		return map[string]int64{}
	}
	return maps.Clone(c.byPattern)
}
