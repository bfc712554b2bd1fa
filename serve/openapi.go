package serve

import (
	_ "embed"
	"net/http"
)

// openAPI is the API's OpenAPI 3.1 description; openapi_test.go checks it
// against routes and the request and answer types.
//
//go:embed openapi.json
var openAPI []byte

// serveOpenAPI answers GET /openapi.json, without a token: the document
// describes the API, it grants nothing.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openAPI)
}
