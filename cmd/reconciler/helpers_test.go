package main_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func httptestServer(t *testing.T, h http.HandlerFunc) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}
