package fakekit

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Faults is the fault injection the fakes share: a delay before every
// response, a number of failures to come and a failure rate. Which requests
// a failure applies to, and what the failure looks like on the wire, is
// each fake's. It is safe for concurrent use.
type Faults struct {
	mu         sync.Mutex
	latency    time.Duration
	failNext   int
	failNextSt int
	failRate   float64
	failRateSt int
	rng        *rand.Rand
}

// NewFaults returns Faults that draw the failure rate's coin from rng, so
// that a seeded fake fails the same requests every run.
func NewFaults(rng *rand.Rand) *Faults { return &Faults{rng: rng} }

// SetLatency delays every response by d.
func (f *Faults) SetLatency(d time.Duration) {
	f.mu.Lock()
	f.latency = d
	f.mu.Unlock()
}

// Latency is the delay SetLatency set.
func (f *Faults) Latency() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latency
}

// FailNext makes the next n calls of Fail return status.
func (f *Faults) FailNext(status, n int) {
	f.mu.Lock()
	f.failNext, f.failNextSt = n, status
	f.mu.Unlock()
}

// SetFailureRate makes each call of Fail return status with probability p
// (once FailNext's failures are spent); p = 0 turns it off.
func (f *Faults) SetFailureRate(status int, p float64) {
	f.mu.Lock()
	f.failRate, f.failRateSt = p, status
	f.mu.Unlock()
}

// Fail decides whether the request at hand fails: the status it fails
// with, or 0. Each call consumes one of FailNext's failures or, past them,
// one draw of the failure rate's coin when a rate is set.
func (f *Faults) Fail() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failNext > 0 {
		f.failNext--
		return f.failNextSt
	}
	if f.failRate > 0 && f.rng.Float64() < f.failRate {
		return f.failRateSt
	}
	return 0
}

// Wait waits for d, or until ctx ends (the client gave up).
func Wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
