package fakekit

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
)

// Loopback serves a fake over HTTP on 127.0.0.1, on a port the kernel
// picks: never on ::1 (httptest's fallback) nor on every interface. The
// zero value is ready; it is safe for concurrent use.
type Loopback struct {
	mu sync.Mutex
	ts *httptest.Server
}

// Start serves h and returns the base URL, e.g. "http://127.0.0.1:41234".
// Once started, it returns the same URL and ignores h. It panics, naming
// the fake, when it cannot listen: a test helper has no one to return to.
func (l *Loopback) Start(fake string, h http.Handler) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ts != nil {
		return l.ts.URL
	}
	ts := httptest.NewUnstartedServer(h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fake + ": listen: " + err.Error())
	}
	ts.Listener.Close()
	ts.Listener = ln
	ts.Start()
	l.ts = ts
	return ts.URL
}

// Close stops the server Start started, if any.
func (l *Loopback) Close() {
	l.mu.Lock()
	ts := l.ts
	l.mu.Unlock()
	if ts != nil {
		ts.Close()
	}
}
