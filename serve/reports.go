package serve

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/reconciler/reconciler/internal/signedlink"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/store"
)

// reportCSP is the HTML report's Content-Security-Policy: the page is one
// self-contained document (inline <style>, inline SVG, no scripts, no
// fetches), so nothing but its inline style is allowed, and no other site
// may frame it. It repeats the page's own meta tag, which a browser
// applies too.
const reportCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// reportPage serves GET /runs/{id}/report.html and .csv to a browser:
// the run's report in that format, to a caller with a bearer token or with
// the run's signed link (signedlink: ?expires=…&sig=…, what the chat
// message links, signed with notify.report_link_key). The same signature
// opens both formats, and the HTML page links its CSV with it.
//
// Signed links rather than a token in the URL: a chat message is copied
// and forwarded, and a bearer token in it would grant the whole API (POST
// /runs too) until it was rotated; a signed link opens one run's report,
// read only, until it expires, and rotating the key revokes every link.
//
// Answers: 200; 401 with neither a token nor a signature; 403 for a
// signature that is not valid for this run (altered, another run's, an
// old key) or has expired (saying when, and how to get a new link); 404
// for a run that does not exist (checked only once access is granted).
// Every answer is private and never cached, and sends no Referer on, so
// the signed URL does not leak from the page.
func (s *Server) reportPage(callers []caller, format string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "private, no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Robots-Tag", "noindex, nofollow")
		id, err := parseRunID(r.PathValue("id"))
		if err != nil {
			plain(w, http.StatusBadRequest, "the run id must be a positive integer")
			return
		}
		q := r.URL.Query()
		if bearer(callers, r) == "" {
			err := signedlink.Verify(s.Runner.Config.Notify.ReportLinkKey(), id, q, s.clock().Now())
			var exp *signedlink.ExpiredError
			switch {
			case errors.Is(err, signedlink.ErrMissing):
				h.Set("WWW-Authenticate", `Bearer realm="reconciler"`)
				plain(w, http.StatusUnauthorized, "this report needs a bearer token or a signed link; ask for a link with reconciler report --run "+strconv.FormatInt(id, 10)+" --link")
				return
			case errors.As(err, &exp):
				plain(w, http.StatusForbidden, fmt.Sprintf("this link expired on %s; ask for a new one with reconciler report --run %d --link",
					exp.At.UTC().Format("2006-01-02 15:04 UTC"), id))
				return
			case err != nil:
				plain(w, http.StatusForbidden, "this link is not valid for run "+strconv.FormatInt(id, 10)+" (altered, or signed with a key since rotated); ask for a new one with reconciler report --run "+strconv.FormatInt(id, 10)+" --link")
				return
			}
		}
		ctx := r.Context()
		if _, err := s.Runner.Runs().Get(ctx, id); errors.Is(err, store.ErrNotFound) {
			plain(w, http.StatusNotFound, fmt.Sprintf("no run %d", id))
			return
		} else if err != nil {
			s.Log.Error("report page: run not readable", "run_id", id, "error", err)
			plain(w, http.StatusInternalServerError, "the run could not be read; see the server's log")
			return
		}
		if format == "html" {
			var b bytes.Buffer
			if err := report.Write(ctx, &b, s.Runner.DB, "html", id); err != nil {
				s.Log.Error("report page: report not rendered", "run_id", id, "format", format, "error", err)
				plain(w, http.StatusInternalServerError, "the report could not be rendered; see the server's log")
				return
			}
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Content-Security-Policy", reportCSP)
			_, _ = w.Write(withCSVLink(b.Bytes(), signedQuery(q)))
			return
		}
		h.Set("Content-Type", "text/csv; charset=utf-8")
		h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="reconciler-run-%d.csv"`, id))
		cw := &countingWriter{w: w}
		if err := report.Write(ctx, cw, s.Runner.DB, "csv", id); err != nil {
			s.Log.Error("report page: report not rendered", "run_id", id, "format", format, "error", err)
			if cw.n == 0 {
				h.Del("Content-Disposition")
				plain(w, http.StatusInternalServerError, "the report could not be rendered; see the server's log")
				return
			}
			// Part of the CSV is out: cut the connection, so that the
			// download fails rather than looking complete.
			panic(http.ErrAbortHandler)
		}
	}
}

// bearer is auth's check without its refusal (reportPage answers for
// itself): the caller's name, "" when the request carries no valid bearer
// token. Like auth, it compares digests in constant time against every
// caller.
func bearer(callers []caller, r *http.Request) string {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return ""
	}
	d := sha256.Sum256([]byte(token))
	name := ""
	for _, c := range callers {
		if subtle.ConstantTimeCompare(d[:], c.digest[:]) == 1 {
			name = c.name
		}
	}
	return name
}

// signedQuery keeps only the signed link's parameters of q, encoded; ""
// when it has none (a bearer token's request).
func signedQuery(q map[string][]string) string {
	exp, sig := first(q, signedlink.ParamExpires), first(q, signedlink.ParamSig)
	if exp == "" || sig == "" {
		return ""
	}
	return signedlink.ParamExpires + "=" + exp + "&" + signedlink.ParamSig + "=" + sig
}

func first(q map[string][]string, k string) string {
	if v := q[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// withCSVLink puts a link to the same run's CSV, with the same signed
// query, at the top of the page (after its header). The link is relative
// (report.csv beside report.html), so it works behind any path prefix.
func withCSVLink(page []byte, query string) []byte {
	href := "report.csv"
	if query != "" {
		href += "?" + query
	}
	link := `<p class="download"><a href="` + html.EscapeString(href) + `" download>Download this report as CSV</a></p>` + "\n"
	at := bytes.Index(page, []byte("</header>"))
	if at < 0 {
		at = bytes.Index(page, []byte("<body>"))
		if at < 0 {
			return page
		}
		at += len("<body>")
	} else {
		at += len("</header>")
	}
	out := make([]byte, 0, len(page)+len(link)+1)
	out = append(out, page[:at]...)
	out = append(out, '\n')
	out = append(out, link...)
	return append(out, page[at:]...)
}

// plain answers a one-line text message.
func plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, strings.TrimSpace(msg)+"\n")
}

// countingWriter counts what reached w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
