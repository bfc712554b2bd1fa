package stripe_test

// Checks against Stripe's own stripe-mock, which validates every request
// against Stripe's OpenAPI spec and answers 400 invalid_request_error for a
// parameter the spec does not allow. scripts/test.sh installs it and exports
// STRIPE_MOCK_BIN; without it (and without stripe-mock on PATH) these tests
// fail in CI and skip elsewhere.
//
// What stripe-mock answers (v0.203.0): it is stateless and answers from
// fixtures, ignoring filters. GET /v1/events always lists one event, a
// plan.created event created 1234567890, whatever created[] and types[]
// say, and ending_before too: the window's page holds the anchor event
// itself (before the window, of a type not asked for), so a run reads a
// page whose events map to no payment. GET
// /v1/payment_intents/{id} echoes the requested id (status
// requires_payment_method, created 1234567890).
//
// What stripe-mock validates (v0.203.0, probed by hand): each parameter's
// name against the endpoint's spec (an unknown one, status= on
// /v1/balance_transactions or payout= on /v1/payouts, is a 400) and its
// type (limit=abc, created[gte]=abc are 400s). It does not check values:
// a types[] name that is no event type, 21 types[], status=bogus on
// /v1/payouts, limit=101, an unknown created[foo] and an expand[] path that
// does not exist are all answered 200. The tests below therefore assert the
// exact parameters themselves; stripe-mock's acceptance covers the names
// and types only.
//
// Its fixtures, as the tests read them: the dispute dp_… is
// warning_needs_response with payment_intent null; the refund re_… is
// succeeded, 100 usd, payment_intent null; the payout po_… is automatic,
// in_transit, reconciliation_status completed; the account's payout schedule
// is daily with delay_days 2; the balance transaction list holds one
// available transaction (available_on 1234567890) whose source is a charge
// id, and expanded (expand[]=data.source) an application_fee object, so it
// names no PaymentIntent; the payout list holds one automatic in_transit
// payout whatever status= asks; the dispute list one warning_needs_response
// dispute; a PaymentIntent's expanded latest_charge is uncaptured, not
// disputed, with an available balance_transaction.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/reconcile"
)

const stripeMockKey = "sk_test_123"

// stripeMockBinary is the stripe-mock to run: $STRIPE_MOCK_BIN, else
// stripe-mock on PATH. Missing, the test fails in CI (a check that skips
// silently in CI is no check) and skips elsewhere.
func stripeMockBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("STRIPE_MOCK_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("STRIPE_MOCK_BIN=%s: %v", bin, err)
		}
		return bin
	}
	if bin, err := exec.LookPath("stripe-mock"); err == nil {
		return bin
	}
	msg := "stripe-mock not found: set STRIPE_MOCK_BIN or run the tests through scripts/test.sh"
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatal(msg + " (CI is set: this check must not skip)")
	}
	t.Skip(msg)
	return ""
}

// exchange is one request stripe-mock answered.
type exchange struct {
	Method, Path string
	Query        url.Values
	Account      string // the Stripe-Account header
	Status       int
	Body         string // the answer, kept for 4xx and 5xx only
}

func (x exchange) String() string {
	s := fmt.Sprintf("%s %s?%s -> %d", x.Method, x.Path, x.Query.Encode(), x.Status)
	if x.Body != "" {
		s += " " + strings.Join(strings.Fields(x.Body), " ")
	}
	return s
}

// stripeMock is a running stripe-mock behind a recording proxy that passes
// every request and answer through unchanged.
type stripeMock struct {
	URL    string // the proxy: give it to the provider as BaseURL
	Direct string // stripe-mock itself
	mu     sync.Mutex
	log    []exchange
	// window, when set, replaces the body of stripe-mock's answers to the
	// window's event listing (the requests with types[]): the requests still
	// reach stripe-mock and are validated; only its answer (always one
	// plan.created event) is swapped for these events (oldest first here,
	// listed newest first, honouring ending_before and starting_after as
	// Stripe does), made of stripe-mock's own objects.
	window []map[string]any
	// noAnchor answers the anchor request (events before the window) with
	// an empty list, as for a young account.
	noAnchor bool
	// rewrite, by path, edits stripe-mock's 200 answers (its fixtures) into
	// the objects a test needs (a captured charge, a manual schedule); the
	// requests still reach stripe-mock and are validated.
	rewrite map[string]func(q url.Values, body map[string]any)
}

// startStripeMock starts stripe-mock on ports of its own choosing on
// loopback (HTTP and HTTPS both, so parallel tests never collide on the
// default 12111/12112), waits until it answers and stops it at test end,
// and puts a recording proxy of this test's in front of it.
func startStripeMock(t *testing.T) *stripeMock {
	t.Helper()
	return proxyStripeMock(t, startStripeMockProcess(t))
}

// startStripeMockProcess starts stripe-mock as startStripeMock does and
// returns its address; it stops at the end of t, so the subtests of t can
// share it, each behind a proxy of its own (stripe-mock is stateless).
func startStripeMockProcess(t *testing.T) string {
	t.Helper()
	bin := stripeMockBinary(t)
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	require.NoError(t, cmd.Start(), "start %s", bin)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	var (
		outMu  sync.Mutex
		output strings.Builder
	)
	out := func() string {
		outMu.Lock()
		defer outMu.Unlock()
		return output.String()
	}
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		re := regexp.MustCompile(`Listening for HTTP at address: (\S+)`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			outMu.Lock()
			output.WriteString(sc.Text() + "\n")
			outMu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr) // never block stripe-mock on its output
	}()
	var direct string
	select {
	case a := <-addr:
		direct = "http://" + a
	case <-exited:
		<-scanned
		t.Fatalf("stripe-mock exited before listening:\n%s", out())
	case <-time.After(30 * time.Second):
		t.Fatalf("stripe-mock did not listen within 30s:\n%s", out())
	}
	// Wait until it answers an authenticated request.
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, direct+"/v1/balance", nil)
		req.SetBasicAuth(stripeMockKey, "")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock at %s does not answer: %v", direct, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return direct
}

// proxyStripeMock puts a recording proxy in front of the stripe-mock at
// direct, for the life of t.
func proxyStripeMock(t *testing.T, direct string) *stripeMock {
	t.Helper()
	m := &stripeMock{Direct: direct}
	target, err := url.Parse(direct)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		x := exchange{Method: resp.Request.Method, Path: resp.Request.URL.Path, Query: resp.Request.URL.Query(), Status: resp.StatusCode,
			Account: resp.Request.Header.Get("Stripe-Account")}
		if resp.StatusCode == http.StatusOK && x.Path == "/v1/events" {
			if page := m.eventsPage(x.Query); page != nil {
				replaceBody(resp, page)
			}
		}
		if resp.StatusCode == http.StatusOK {
			if err := m.rewriteAnswer(resp, x); err != nil {
				return err
			}
		}
		if resp.StatusCode >= 400 {
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				return err
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
			x.Body = string(b)
		}
		m.mu.Lock()
		m.log = append(m.log, x)
		m.mu.Unlock()
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

func replaceBody(resp *http.Response, b []byte) {
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", fmt.Sprint(len(b)))
}

// rewriteAnswer applies the rewrite set for the exchange's path, if any, to
// stripe-mock's (accepted) answer.
func (m *stripeMock) rewriteAnswer(resp *http.Response, x exchange) error {
	m.mu.Lock()
	fn := m.rewrite[x.Path]
	m.mu.Unlock()
	if fn == nil {
		return nil
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("stripe-mock's answer to %s: %w", x.Path, err)
	}
	fn(x.Query, obj)
	b, err = json.Marshal(obj)
	if err != nil {
		return err
	}
	replaceBody(resp, b)
	return nil
}

// setRewrite makes the proxy pass stripe-mock's 200 answers to GET path
// through fn (with the request's query) before the provider reads them.
func (m *stripeMock) setRewrite(path string, fn func(q url.Values, body map[string]any)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rewrite == nil {
		m.rewrite = map[string]func(url.Values, map[string]any){}
	}
	m.rewrite[path] = fn
}

func hasTypes(q url.Values) bool {
	for k := range q {
		if k == "types" || strings.HasPrefix(k, "types[") {
			return true
		}
	}
	return false
}

// eventsPage is the answer that replaces stripe-mock's to an event listing
// with query q, or nil to keep stripe-mock's.
func (m *stripeMock) eventsPage(q url.Values) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	var data []any
	switch {
	case m.window != nil && hasTypes(q):
		lo, hi := 0, len(m.window) // window[lo:hi] qualifies
		for i, ev := range m.window {
			if id := q.Get("ending_before"); id != "" && ev["id"] == id {
				lo = i + 1
			}
			if id := q.Get("starting_after"); id != "" && ev["id"] == id {
				hi = i
			}
		}
		data = []any{}
		for i := hi - 1; i >= lo; i-- {
			data = append(data, m.window[i])
		}
	case m.noAnchor && !hasTypes(q):
		data = []any{}
	default:
		return nil
	}
	page, err := json.Marshal(map[string]any{"object": "list", "url": "/v1/events", "has_more": false, "data": data})
	if err != nil {
		panic(err)
	}
	return page
}

// object is stripe-mock's answer to GET path (its fixture, with the id in
// the path echoed).
func (m *stripeMock) object(t *testing.T, path string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, m.Direct+path, nil)
	require.NoError(t, err)
	req.SetBasicAuth(stripeMockKey, "")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, path)
	var obj map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&obj))
	return obj
}

func (m *stripeMock) exchanges() []exchange {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]exchange(nil), m.log...)
}

// requireAllAccepted fails naming every request stripe-mock did not answer
// with a 2xx (its 400s quote the OpenAPI validation error), both as the
// proxy saw them and as the provider counted them.
func (m *stripeMock) requireAllAccepted(t *testing.T, p *stripe.Provider) {
	t.Helper()
	xs := m.exchanges()
	require.NotEmpty(t, xs, "no request reached stripe-mock")
	var bad []string
	for _, x := range xs {
		if x.Status < 200 || x.Status > 299 {
			bad = append(bad, x.String())
		}
	}
	require.Empty(t, bad, "stripe-mock refused requests the provider made")
	if p != nil {
		by := p.RequestsByStatus()
		var total int64
		for status, n := range by {
			require.True(t, status >= 200 && status <= 299, "the provider counted %d requests answered %d: %v", n, status, by)
			total += n
		}
		require.Positive(t, total, "the provider counted no request: %v", by)
		t.Logf("requests by status: %v; at stripe-mock: %d", by, len(xs))
	}
	for _, x := range xs {
		t.Logf("  %s", x)
	}
}

func (m *stripeMock) requested(method, path string) int {
	n := 0
	for _, x := range m.exchanges() {
		if x.Method == method && x.Path == path {
			n++
		}
	}
	return n
}

func newStripeMockProvider(t *testing.T, m *stripeMock) *stripe.Provider {
	t.Helper()
	p, err := stripe.New(stripe.Config{APIKey: stripeMockKey, BaseURL: m.URL, MaxRetries: 2, Timeout: 30 * time.Second})
	require.NoError(t, err)
	return p
}

// bothStores runs fn on PostgreSQL (pgtest: skipped without DATABASE_URL
// outside CI, failing in CI) and on the embedded SQLite store.
func bothStores(t *testing.T, fn func(t *testing.T, db *pgtest.DB)) {
	t.Helper()
	stripeMockBinary(t) // fail (CI) or skip before any store is made
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			var db *pgtest.DB
			if store == "postgres" {
				db = pgtest.New(t)
			} else {
				db = pgtest.NewSQLite(t)
			}
			fn(t, db)
		})
	}
}

func count(t *testing.T, db *pgtest.DB, model any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Model(model).Count(&n).Error)
	return n
}

func runStripeMock(t *testing.T, db *pgtest.DB, p *stripe.Provider, dry bool) reconcile.Result {
	t.Helper()
	return runStripeMockAccount(t, db, p, "", dry)
}

// runStripeMockAccount runs the last 24 hours of account ("" the platform).
func runStripeMockAccount(t *testing.T, db *pgtest.DB, p *stripe.Provider, account string, dry bool) reconcile.Result {
	t.Helper()
	now := time.Now().UTC()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := reconcile.Run(ctx, reconcile.Options{
		DB: db.DB, Provider: p, Account: account, DryRun: dry,
		Since: now.Add(-24 * time.Hour), Until: now,
	})
	require.NoError(t, err)
	require.Equal(t, models.RunSucceeded, res.Run.Status, "run error: %v", res.Run.Error)
	require.Equal(t, account, res.Run.Account)
	require.Equal(t, dry, res.Run.DryRun)
	require.NotNil(t, res.Run.FinishedAt)
	require.Positive(t, res.Run.APIRequests)
	var stored models.Run
	require.NoError(t, db.First(&stored, res.Run.ID).Error)
	require.Equal(t, models.RunSucceeded, stored.Status)
	return res
}

func seedStuck(t *testing.T, db *pgtest.DB, id string) {
	t.Helper()
	old := time.Now().UTC().Add(-10 * 24 * time.Hour).Truncate(time.Second)
	require.NoError(t, db.Create(&models.Payment{
		Provider: stripe.Name, ProviderID: id, State: models.StateAuthorised,
		Amount: 1099, Currency: "usd", SourceUpdatedAt: &old,
	}).Error)
}

func TestStripeMockRun(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, db *pgtest.DB) {
		m := startStripeMock(t)
		p := newStripeMockProvider(t, m)
		res := runStripeMock(t, db, p, false)
		require.Positive(t, m.requested(http.MethodGet, "/v1/events"), "the event log was read")
		// stripe-mock lists its plan.created fixture whatever types[] and
		// created[] ask: an event the request excluded is not the window's.
		require.Zero(t, res.Run.EventsRead, "an event outside the request's filters is skipped")
		require.Zero(t, count(t, db, &models.WebhookEvent{}), "and never recorded")
		require.Zero(t, res.Run.Repaired, "stripe-mock's events (plan.created) concern no payment")
		require.Zero(t, count(t, db, &models.Payment{}))
		t.Logf("run: events read %d, examined %d, synthetic events %d, webhook_events rows %d",
			res.Run.EventsRead, res.Run.Examined, res.Run.SyntheticEvents, count(t, db, &models.WebhookEvent{}))
		m.requireAllAccepted(t, p)
	})
}

// TestStripeMockReadAhead: the read-ahead's request (the events of a
// stretch newest first: created[gte], created[lt], types[], no cursor) is
// one Stripe's OpenAPI spec accepts, and it lists what stripe-mock has.
func TestStripeMockReadAhead(t *testing.T) {
	t.Parallel()
	stripeMockBinary(t)
	m := startStripeMock(t)
	p := newStripeMockProvider(t, m)
	now := time.Now().UTC()
	ids, err := p.ReadAhead(context.Background(), "", now.Add(-24*time.Hour), now, 10)
	require.NoError(t, err)
	t.Logf("listed %v", ids)
	ahead := 0
	for _, x := range m.exchanges() {
		if x.Path == "/v1/events" && x.Query.Get("ending_before") == "" && x.Query.Get("starting_after") == "" &&
			x.Query.Get("created[lt]") != "" && x.Query.Get("created[gte]") != "" && x.Query.Get("types[0]") != "" {
			ahead++
		}
	}
	require.Positive(t, ahead, "the read-ahead's request reached stripe-mock")
	m.requireAllAccepted(t, p)
}

// TestStripeMockPayoutsAhead: the window's payout events listed at once
// and a payout's balance transactions listed ahead (payoutahead.go) are
// requests stripe-mock accepts: its fixture event, whatever the types
// asked, is not a payout event, so what is listed ahead is at most its
// fixture payout's list.
func TestStripeMockPayoutsAhead(t *testing.T) {
	t.Parallel()
	stripeMockBinary(t)
	m := startStripeMock(t)
	p := newStripeMockProvider(t, m)
	now := time.Now().UTC()
	n := p.PayoutsAhead(context.Background(), "", now.Add(-24*time.Hour), now)
	t.Logf("payout listings started: %d", n)
	asked := 0
	for _, x := range m.exchanges() {
		if x.Path == "/v1/events" && x.Query.Get("types[0]") == "payout.paid" && x.Query.Get("types[4]") == "" &&
			x.Query.Get("created[gte]") != "" && x.Query.Get("created[lt]") != "" {
			asked++
		}
	}
	require.Equal(t, 1, asked, "the window's payout events asked for once, by their four types")
	m.requireAllAccepted(t, p)
}

func TestStripeMockDryRun(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, db *pgtest.DB) {
		m := startStripeMock(t)
		p := newStripeMockProvider(t, m)
		seedStuck(t, db, "pi_stripemock_dry")
		var before []models.Payment
		require.NoError(t, db.Order("id").Find(&before).Error)
		events := count(t, db, &models.WebhookEvent{})
		res := runStripeMock(t, db, p, true)
		var after []models.Payment
		require.NoError(t, db.Order("id").Find(&after).Error)
		require.Equal(t, before, after, "a dry run writes nothing to payments")
		require.Equal(t, events, count(t, db, &models.WebhookEvent{}), "a dry run writes nothing to webhook_events")
		require.Zero(t, count(t, db, &models.WebhookEvent{}))
		require.Equal(t, 1, m.requested(http.MethodGet, "/v1/payment_intents/pi_stripemock_dry"), "the stuck path ran in the dry run too")
		require.Zero(t, res.Run.EventsRead, "stripe-mock's fixture event is outside the request's filters")
		m.requireAllAccepted(t, p)
	})
}

func TestStripeMockStuckPaymentRefetched(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, db *pgtest.DB) {
		m := startStripeMock(t)
		p := newStripeMockProvider(t, m)
		const id = "pi_stripemock_stuck"
		seedStuck(t, db, id)
		res := runStripeMock(t, db, p, false)
		require.Equal(t, 1, m.requested(http.MethodGet, "/v1/payment_intents/"+id), "the stuck payment was re-fetched by id")
		for _, x := range m.exchanges() {
			if x.Path == "/v1/payment_intents/"+id {
				require.Equal(t, []string{"latest_charge.refunds", "latest_charge.balance_transaction"}, expands(x.Query),
					"with its latest charge, its refunds and its balance transaction (the capture's time, availability)")
			}
		}
		require.Positive(t, res.Run.Examined, "the re-fetched payment was examined")
		// stripe-mock answers requires_payment_method (created), dated 2009:
		// older than our authorised fact, so nothing moves.
		var row models.Payment
		require.NoError(t, db.Where("provider = ? AND provider_id = ?", stripe.Name, id).First(&row).Error)
		require.Equal(t, models.StateAuthorised, row.State, "never moved backwards")
		var items []models.DriftItem
		require.NoError(t, db.Where("run_id = ? AND provider_id = ?", res.Run.ID, id).Find(&items).Error)
		// Consistent with our row, so normally no drift item; logged.
		for _, it := range items {
			t.Logf("drift item: %s %s local=%v provider=%v", it.Kind, it.Action, deref(it.LocalState), deref(it.ProviderState))
		}
		m.requireAllAccepted(t, p)
	})
}

// expands lists the expand parameters in the order sent, however they are
// spelt (stripe-go sends expand[0]=…, the docs expand[]=…).
func expands(q url.Values) []string { return indexed(q, "expand") }

// indexed lists the values of the array parameter name in the order sent:
// name[0], name[1], … (stripe-go), or name[] and name as repeated. Any other
// key under name[…] is appended as "key=value", so that an exact comparison
// fails on it.
func indexed(q url.Values, name string) []string {
	seen := map[string]bool{name: true, name + "[]": true}
	out := append(append([]string(nil), q[name+"[]"]...), q[name]...)
	for i := 0; ; i++ {
		k := fmt.Sprintf("%s[%d]", name, i)
		v, ok := q[k]
		if !ok {
			break
		}
		seen[k] = true
		out = append(out, v...)
	}
	var stray []string
	for k, vs := range q {
		if strings.HasPrefix(k, name+"[") && !seen[k] {
			for _, v := range vs {
				stray = append(stray, k+"="+v)
			}
		}
	}
	sort.Strings(stray)
	return append(out, stray...)
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestStripeMockBinaryDryRun runs the built binary the way an operator
// would, against stripe-mock, on both stores.
func TestStripeMockBinaryDryRun(t *testing.T) {
	t.Parallel()
	stripeMockBinary(t)
	bin := filepath.Join(t.TempDir(), "reconciler")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/reconciler/reconciler/cmd/reconciler").CombinedOutput()
	require.NoError(t, err, "go build ./cmd/reconciler: %s", out)
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			m := startStripeMock(t)
			dir := t.TempDir()
			env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
				"STRIPE_API_KEY=" + stripeMockKey, "STRIPE_API_BASE=" + m.URL}
			var db *pgtest.DB
			if store == "postgres" {
				db = pgtest.New(t)
				env = append(env, "DATABASE_URL="+db.URL)
			} else {
				// No database configured: the embedded store, ./reconciler.db.
			}
			cmd := exec.Command(bin, "run", "--dry-run", "--provider", "stripe")
			cmd.Dir, cmd.Env = dir, env
			var so, se bytes.Buffer
			cmd.Stdout, cmd.Stderr = &so, &se
			err := cmd.Run()
			require.NoError(t, err, "reconciler run --dry-run: stdout:\n%s\nstderr:\n%s", so.String(), se.String())
			require.Positive(t, m.requested(http.MethodGet, "/v1/events"), "the binary read the event log at stripe-mock")
			m.requireAllAccepted(t, nil)
			if db == nil {
				sq, err := dbopen.SQLite(filepath.Join(dir, "reconciler.db"))
				require.NoError(t, err)
				t.Cleanup(func() {
					if sqlDB, err := sq.DB(); err == nil {
						_ = sqlDB.Close()
					}
				})
				db = &pgtest.DB{DB: sq}
			}
			var runs []models.Run
			require.NoError(t, db.Find(&runs).Error)
			require.Len(t, runs, 1)
			require.Equal(t, models.RunSucceeded, runs[0].Status)
			require.True(t, runs[0].DryRun)
			require.Zero(t, count(t, db, &models.Payment{}))
			require.Zero(t, count(t, db, &models.WebhookEvent{}))
		})
	}
}

// TestStripeMockEventTypes feeds the provider events of the types it reads,
// made of stripe-mock's own objects, so that the requests those events lead
// to (the balance transactions of a payout) are validated too, and a run
// writes a payment and its synthetic event on both stores.
func TestStripeMockEventTypes(t *testing.T) {
	t.Parallel()
	for _, anchored := range []bool{true, false} {
		t.Run(fmt.Sprintf("anchored=%v", anchored), func(t *testing.T) {
			t.Parallel()
			testStripeMockEventTypes(t, anchored)
		})
	}
}

func testStripeMockEventTypes(t *testing.T, anchored bool) {
	bothStores(t, func(t *testing.T, db *pgtest.DB) {
		m := startStripeMock(t)
		p := newStripeMockProvider(t, m)
		base := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second)
		var window []map[string]any
		for i, e := range []struct{ typ, path string }{
			{"payment_intent.succeeded", "/v1/payment_intents/pi_stripemock_evt"},
			{"charge.refunded", "/v1/charges/ch_stripemock_evt"},
			{"charge.refund.updated", "/v1/refunds/re_stripemock_evt"},
			{"charge.dispute.closed", "/v1/disputes/dp_stripemock_evt"},
			{"payout.paid", "/v1/payouts/po_stripemock_evt"},
		} {
			obj := m.object(t, e.path)
			require.Equal(t, filepath.Base(e.path), obj["id"], "stripe-mock echoes the id asked for")
			window = append(window, map[string]any{
				"id": fmt.Sprintf("evt_stripemock_%d", i), "object": "event", "type": e.typ,
				"created": base.Add(time.Duration(i) * time.Minute).Unix(), "livemode": false,
				"api_version": "2023-10-16", "pending_webhooks": 0, "data": map[string]any{"object": obj},
			})
		}
		m.mu.Lock()
		m.window, m.noAnchor = window, !anchored
		m.mu.Unlock()

		res := runStripeMock(t, db, p, false)
		require.Equal(t, int64(len(window)), res.Run.EventsRead, "every event once")
		bt, walks := 0, 0
		for _, x := range m.exchanges() {
			if x.Path == "/v1/balance_transactions" {
				bt++
				require.Equal(t, "po_stripemock_evt", x.Query.Get("payout"))
				require.Equal(t, []string{"data.source"}, expands(x.Query))
			}
			if x.Path == "/v1/events" && hasTypes(x.Query) && x.Query.Get("ending_before") == "" {
				walks++
			}
		}
		require.Equal(t, 1, bt, "payout.paid lists the payout's balance transactions")
		if anchored {
			require.Zero(t, walks, "with an anchor the window is read forward only")
		} else {
			require.Equal(t, 1, walks, "without an anchor the window is walked newest first once")
		}
		// The PaymentIntent (requires_payment_method: created) was unknown
		// locally: its row is created, with the event as a synthetic row.
		var row models.Payment
		require.NoError(t, db.Where("provider = ? AND provider_id = ?", stripe.Name, "pi_stripemock_evt").First(&row).Error)
		require.Equal(t, models.StateCreated, row.State)
		require.Equal(t, int64(1099), row.Amount)
		require.Equal(t, "usd", row.Currency)
		var evs []models.WebhookEvent
		require.NoError(t, db.Where("source = ?", stripe.Name).Find(&evs).Error)
		ids := map[string]bool{}
		for _, e := range evs {
			require.True(t, e.Synthetic, e.EventID)
			ids[e.EventID] = true
		}
		require.True(t, ids["evt_stripemock_0"], "the payment's event is recorded: %v", ids)
		require.Equal(t, int64(1), res.Run.Repaired)
		m.requireAllAccepted(t, p)
	})
}

// TestStripeMockConnectedAccount lists the connected accounts and runs one
// of them (every request with the Stripe-Account header).
func TestStripeMockConnectedAccount(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, db *pgtest.DB) {
		m := startStripeMock(t)
		p := newStripeMockProvider(t, m)
		accts, err := p.ConnectedAccounts(context.Background())
		require.NoError(t, err)
		require.NotEmpty(t, accts)
		seedStuck(t, db, "pi_stripemock_connected") // the platform's: not re-fetched for the account
		now := time.Now().UTC()
		res, err := reconcile.Run(context.Background(), reconcile.Options{
			DB: db.DB, Provider: p, Account: accts[0], Since: now.Add(-24 * time.Hour), Until: now,
		})
		require.NoError(t, err)
		require.Equal(t, models.RunSucceeded, res.Run.Status, "run error: %v", res.Run.Error)
		require.Equal(t, accts[0], res.Run.Account)
		require.Zero(t, m.requested(http.MethodGet, "/v1/payment_intents/pi_stripemock_connected"))
		for _, x := range m.exchanges() {
			if x.Path == "/v1/events" {
				require.Equal(t, accts[0], x.Account, "the account's events are read with Stripe-Account")
			}
		}
		m.requireAllAccepted(t, p)
	})
}

// TestStripeMockProviderBehaviour drives each request and mapping the
// provider gained with API versions, refund.* and dispute events, payout
// schedules and the settling stuck path through the real provider against
// stripe-mock. The subtests share one stripe-mock process (it is stateless;
// each has its own recording proxy), so they add little to the suite.
func TestStripeMockProviderBehaviour(t *testing.T) {
	t.Parallel()
	direct := startStripeMockProcess(t)
	t.Run("Listing", func(t *testing.T) { t.Parallel(); testStripeMockListing(t, direct) })
	t.Run("ManualSchedule", func(t *testing.T) { t.Parallel(); testStripeMockManualSchedule(t, direct) })
	t.Run("Window", func(t *testing.T) { t.Parallel(); testStripeMockWindow(t, direct) })
	t.Run("Passes", func(t *testing.T) { t.Parallel(); testStripeMockPasses(t, direct) })
	t.Run("StuckCaptured", func(t *testing.T) { t.Parallel(); testStripeMockStuckCaptured(t, direct) })
	t.Run("StuckCapturedSettles", func(t *testing.T) { t.Parallel(); testStripeMockStuckSettles(t, direct) })
}

// after returns the exchanges after the first n.
func after(xs []exchange, n int) []exchange { return xs[n:] }

func ofPath(xs []exchange, method, path string) []exchange {
	var out []exchange
	for _, x := range xs {
		if x.Method == method && x.Path == path {
			out = append(out, x)
		}
	}
	return out
}

// ceilUnix is the exclusive end in whole seconds the provider sends for a
// window ending at t (created[lt] covers a sub-second end).
func ceilUnix(t time.Time) int64 {
	if t.Nanosecond() != 0 {
		return t.Unix() + 1
	}
	return t.Unix()
}

func unixStr(t time.Time) string { return fmt.Sprint(t.Unix()) }

func seedPayment(t *testing.T, db *pgtest.DB, row models.Payment) models.Payment {
	t.Helper()
	row.Provider = stripe.Name
	if row.Currency == "" {
		row.Currency = "usd"
	}
	require.NoError(t, db.Create(&row).Error)
	return paymentRow(t, db, row.ProviderID)
}

func paymentRow(t *testing.T, db *pgtest.DB, id string) models.Payment {
	t.Helper()
	var row models.Payment
	require.NoError(t, db.Where("provider = ? AND provider_id = ?", stripe.Name, id).First(&row).Error)
	return row
}

func driftItems(t *testing.T, db *pgtest.DB, run int64, id string) []models.DriftItem {
	t.Helper()
	var items []models.DriftItem
	require.NoError(t, db.Where("run_id = ? AND provider_id = ?", run, id).Order("id").Find(&items).Error)
	return items
}

// requireUnchanged asserts the run moved nothing of the row: its state, its
// amounts and its settlement are as seeded.
func requireUnchanged(t *testing.T, db *pgtest.DB, before models.Payment) {
	t.Helper()
	after := paymentRow(t, db, before.ProviderID)
	require.Equal(t, before.State, after.State, "%s: no state change", before.ProviderID)
	require.Equal(t, before.Amount, after.Amount, before.ProviderID)
	require.Equal(t, before.AmountRefunded, after.AmountRefunded, "%s: amount_refunded untouched", before.ProviderID)
	require.Equal(t, before.AmountCaptured, after.AmountCaptured, before.ProviderID)
	require.Equal(t, before.SettledAt, after.SettledAt, before.ProviderID)
	require.Equal(t, before.PayoutID, after.PayoutID, before.ProviderID)
}

// runNotes is the stored run row's notes.
func runNotes(t *testing.T, db *pgtest.DB, run int64) map[string]any {
	t.Helper()
	var stored models.Run
	require.NoError(t, db.First(&stored, run).Error)
	notes := map[string]any{}
	require.NoError(t, json.Unmarshal(stored.Notes, &notes), "notes %s", stored.Notes)
	return notes
}

// mapOf is v as a JSON object. It fails t without stopping it (it also
// runs in the proxy's goroutines, where FailNow must not be called) and
// then returns an empty object.
func mapOf(t *testing.T, v any, what string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s is %T, not an object", what, v)
		return map[string]any{}
	}
	return m
}

// firstOf is the first element of the list object b's data.
func firstOf(t *testing.T, b map[string]any, what string) map[string]any {
	t.Helper()
	data, ok := b["data"].([]any)
	if !ok || len(data) == 0 {
		t.Errorf("%s: no data: %v", what, b)
		return map[string]any{}
	}
	return mapOf(t, data[0], what)
}

// testStripeMockListing: the window's event listing asks for exactly the 20
// types of stripe.EventTypes; the payout schedule is read once per provider
// and account (GET /v1/account, with Stripe-Account for a connected
// account), and stripe-mock's (daily, delay_days 2) lists no balance
// transactions by created.
func testStripeMockListing(t *testing.T, direct string) {
	require.Len(t, stripe.EventTypes, 20, "one request covers them: Stripe takes at most 20 types[]")
	for _, typ := range []string{"refund.updated", "refund.failed", "charge.dispute.created",
		"charge.dispute.funds_withdrawn", "charge.dispute.funds_reinstated", "payout.reconciliation_completed"} {
		require.Contains(t, stripe.EventTypes, typ)
	}
	bothStores(t, func(t *testing.T, db *pgtest.DB) {
		m := proxyStripeMock(t, direct)
		p := newStripeMockProvider(t, m)
		checkRun := func(res reconcile.Result, xs []exchange, account string) {
			t.Helper()
			require.NotEmpty(t, xs)
			for _, x := range xs {
				require.Equal(t, account, x.Account, "every request of the run of %q: %s", account, x)
			}
			listings, anchors := 0, 0
			for _, x := range ofPath(xs, http.MethodGet, "/v1/events") {
				if !hasTypes(x.Query) {
					anchors++
					require.Equal(t, url.Values{"created[lt]": {unixStr(res.Run.WindowStart)}, "limit": {"1"}}, x.Query,
						"the anchor: the newest event of any type before the window")
					continue
				}
				listings++
				require.Equal(t, stripe.EventTypes, indexed(x.Query, "types"), "types[] in order, nothing else")
				require.Equal(t, unixStr(res.Run.WindowStart), x.Query.Get("created[gte]"))
				require.Equal(t, fmt.Sprint(ceilUnix(res.Run.WindowEnd)), x.Query.Get("created[lt]"))
				require.Equal(t, "100", x.Query.Get("limit"))
				require.NotEmpty(t, x.Query.Get("ending_before"), "read forward from the anchor")
			}
			require.Equal(t, 1, anchors)
			require.Equal(t, 1, listings, "stripe-mock's one page")
			require.Empty(t, ofPath(xs, http.MethodGet, "/v1/balance_transactions"),
				"an account paid out daily lists no balance transactions by created (and stripe-mock's events hold no payout)")
		}

		res := runStripeMock(t, db, p, false)
		xs := m.exchanges()
		acct := ofPath(xs, http.MethodGet, "/v1/account")
		require.Len(t, acct, 1, "the platform's schedule, once per run")
		require.Empty(t, acct[0].Query)
		checkRun(res, xs, "")

		const connected = "acct_stripemock_listing"
		n := len(xs)
		res = runStripeMockAccount(t, db, p, connected, false)
		xs = after(m.exchanges(), n)
		acct = ofPath(xs, http.MethodGet, "/v1/account")
		require.Len(t, acct, 1, "the connected account's schedule, once, read with its Stripe-Account")
		checkRun(res, xs, connected)

		// The same provider reads each account's schedule once: a second run
		// of the platform asks again for nothing.
		n = len(m.exchanges())
		res = runStripeMock(t, db, p, false)
		xs = after(m.exchanges(), n)
		require.Empty(t, ofPath(xs, http.MethodGet, "/v1/account"), "read once per provider and account")
		checkRun(res, xs, "")
		manual, delay, err := p.PayoutSchedule(context.Background(), "")
		require.NoError(t, err)
		require.False(t, manual, "stripe-mock's account pays out daily")
		require.Equal(t, int64(2), delay, "delay_days 2")
		require.Len(t, ofPath(m.exchanges(), http.MethodGet, "/v1/account"), 2, "one per account in all")
		m.requireAllAccepted(t, p)
	})
}

// testStripeMockManualSchedule: stripe-mock's account with its schedule
// rewritten to manual (delay_days 3) makes the run list the balance
// transactions created from delay_days + 7 days before the window, with
// their sources, and a charge's available one settles its payment at
// available_on, with no payout.
func testStripeMockManualSchedule(t *testing.T, direct string) {
	bothStores(t, func(t *testing.T, db *pgtest.DB) {
		m := proxyStripeMock(t, direct)
		p := newStripeMockProvider(t, m)
		const id = "pi_stripemock_manual"
		m.setRewrite("/v1/account", func(_ url.Values, b map[string]any) {
			sched := mapOf(t, mapOf(t, mapOf(t, b["settings"], "settings")["payouts"], "settings.payouts")["schedule"], "schedule")
			assert.Equal(t, "daily", sched["interval"], "stripe-mock's fixture")
			sched["interval"], sched["delay_days"] = "manual", 3
		})
		charge := m.object(t, "/v1/charges/ch_stripemock_manual")
		charge["captured"], charge["amount"], charge["amount_captured"], charge["payment_intent"] = true, 1099, 1099, id
		avail := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second)
		m.setRewrite("/v1/balance_transactions", func(_ url.Values, b map[string]any) {
			bt := firstOf(t, b, "balance transactions")
			assert.Equal(t, "available", bt["status"])
			bt["source"], bt["available_on"], bt["amount"] = charge, avail.Unix(), 1099
		})
		fresh := time.Now().UTC().Add(-24 * time.Hour)
		seedPayment(t, db, models.Payment{ProviderID: id, State: models.StateCaptured, Amount: 1099, SourceUpdatedAt: &fresh})

		res := runStripeMock(t, db, p, false)
		bts := ofPath(m.exchanges(), http.MethodGet, "/v1/balance_transactions")
		require.Len(t, bts, 1, "one availability pass, one page")
		from := res.Run.WindowStart.Add(-3*24*time.Hour - stripe.AvailabilityLookback)
		require.Equal(t, url.Values{"created[gte]": {unixStr(from)}, "created[lt]": {unixStr(res.Run.WindowEnd)},
			"limit": {"100"}, "expand[0]": {"data.source"}}, bts[0].Query)
		row := paymentRow(t, db, id)
		require.Equal(t, models.StateSettled, row.State, "settled when its funds became available")
		require.NotNil(t, row.SettledAt)
		require.True(t, avail.Equal(*row.SettledAt), "at available_on: %v", row.SettledAt)
		require.Nil(t, row.PayoutID, "no payout pays a manual account's charges one by one")
		require.Zero(t, m.requested(http.MethodGet, "/v1/payouts"), "no payout is looked for")
		m.requireAllAccepted(t, p)
	})
}

// windowEvent is an event of the injected window made of a stripe-mock object.
func windowEvent(id, typ, apiVersion string, created time.Time, obj map[string]any) map[string]any {
	return map[string]any{
		"id": id, "object": "event", "type": typ, "created": created.Unix(), "livemode": false,
		"api_version": apiVersion, "pending_webhooks": 0, "data": map[string]any{"object": obj},
	}
}

// testStripeMockWindow feeds the run the event types the provider newly
// reads, each made of stripe-mock's own fixture object.
func testStripeMockWindow(t *testing.T, direct string) {
	bothStores(t, func(t *testing.T, db *pgtest.DB) {
		m := proxyStripeMock(t, direct)
		p := newStripeMockProvider(t, m)
		const (
			piDispute  = "pi_stripemock_dispute"
			piZero     = "pi_stripemock_refund_zero"
			piCounted  = "pi_stripemock_refund_counted"
			piZeta     = "pi_stripemock_zeta"
			poRecon    = "po_stripemock_recon"
			poManual   = "po_stripemock_manual"
			zeta       = "2031-01-01.zeta"
			apiVersion = "2023-10-16"
		)
		fresh := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Second) // not stuck
		rows := map[string]models.Payment{}
		for _, r := range []models.Payment{
			{ProviderID: piDispute, State: models.StateCaptured, Amount: 1000},
			{ProviderID: piZero, State: models.StateCaptured, Amount: 1099},
			{ProviderID: piCounted, State: models.StateCaptured, Amount: 1099, AmountRefunded: 100},
			{ProviderID: piZeta, State: models.StateAuthorised, Amount: 1099},
		} {
			r.SourceUpdatedAt = &fresh
			rows[r.ProviderID] = seedPayment(t, db, r)
		}

		dispute := func() map[string]any {
			d := m.object(t, "/v1/disputes/dp_stripemock_window")
			require.Equal(t, "warning_needs_response", d["status"], "stripe-mock's dispute is an open inquiry")
			require.Nil(t, d["payment_intent"], "stripe-mock's dispute names no PaymentIntent")
			require.EqualValues(t, 1000, d["amount"])
			d["payment_intent"] = piDispute
			return d
		}
		failedRefund := func(id, pi string) map[string]any {
			r := m.object(t, "/v1/refunds/"+id)
			require.Equal(t, "succeeded", r["status"], "stripe-mock's refund")
			require.Nil(t, r["payment_intent"])
			require.EqualValues(t, 100, r["amount"])
			r["status"], r["payment_intent"] = "failed", pi
			return r
		}
		recon := m.object(t, "/v1/payouts/"+poRecon)
		require.Equal(t, true, recon["automatic"], "stripe-mock's payout is automatic")
		require.Equal(t, "completed", recon["reconciliation_status"])
		manual := m.object(t, "/v1/payouts/"+poManual)
		manual["automatic"], manual["status"] = false, "paid"
		zetaPI := m.object(t, "/v1/payment_intents/"+piZeta)
		zetaPI["status"] = "succeeded"

		base := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second)
		var window []map[string]any
		for i, e := range []struct {
			typ, version string
			obj          map[string]any
		}{
			{"charge.dispute.created", apiVersion, dispute()},
			{"charge.dispute.funds_withdrawn", apiVersion, dispute()},
			{"refund.failed", apiVersion, failedRefund("re_stripemock_zero", piZero)},
			{"refund.failed", apiVersion, failedRefund("re_stripemock_counted", piCounted)},
			{"payout.reconciliation_completed", apiVersion, recon},
			{"payout.paid", apiVersion, manual},
			{"payment_intent.succeeded", zeta, zetaPI},
		} {
			window = append(window, windowEvent(fmt.Sprintf("evt_stripemock_window_%d", i), e.typ, e.version, base.Add(time.Duration(i)*time.Minute), e.obj))
		}
		m.mu.Lock()
		m.window = window
		m.mu.Unlock()

		res := runStripeMock(t, db, p, false)
		require.Equal(t, int64(len(window)), res.Run.EventsRead, "every event once")
		require.Zero(t, res.Run.Repaired, "none of these events moves a payment")

		// Open dispute: one 'dispute' item (the newer notice replaces the
		// older), reported, no state change.
		items := driftItems(t, db, res.Run.ID, piDispute)
		require.Len(t, items, 1, "%+v", items)
		require.Equal(t, models.KindDispute, items[0].Kind)
		require.Equal(t, models.ActionReported, items[0].Action)
		require.Equal(t, "dispute_warning_needs_response", deref(items[0].ProviderState))
		require.Equal(t, string(models.StateCaptured), deref(items[0].LocalState))
		var detail map[string]any
		require.NoError(t, json.Unmarshal(items[0].Detail, &detail))
		require.Equal(t, "evt_stripemock_window_1", detail["event_id"], "the newest notice stands: %v", detail)
		require.Contains(t, fmt.Sprint(detail["explanation"]), "Stripe withdrew 10.00 USD", "the funds_withdrawn notice: %v", detail)
		requireUnchanged(t, db, rows[piDispute])

		// A failed refund nobody counted moved no money: no item.
		require.Empty(t, driftItems(t, db, res.Run.ID, piZero))
		requireUnchanged(t, db, rows[piZero])
		// One a row counted (amount_refunded 100 >= the refund's 100) is a
		// conflict: amount_refunded is never lowered.
		items = driftItems(t, db, res.Run.ID, piCounted)
		require.Len(t, items, 1, "%+v", items)
		require.Equal(t, models.KindConflict, items[0].Kind)
		require.Equal(t, models.ActionRefused, items[0].Action)
		require.Equal(t, "refund_failed", deref(items[0].ProviderState))
		requireUnchanged(t, db, rows[piCounted])

		// An event rendered in an unknown API version is reported, not read.
		items = driftItems(t, db, res.Run.ID, piZeta)
		require.Len(t, items, 1, "%+v", items)
		require.Equal(t, models.KindUnknownStatus, items[0].Kind)
		require.Equal(t, models.ActionReported, items[0].Action)
		require.Equal(t, "api_version "+zeta, deref(items[0].ProviderState))
		requireUnchanged(t, db, rows[piZeta])

		// payout.reconciliation_completed lists its payout's balance
		// transactions (stripe-mock's: an application fee, no payment); the
		// manual payout.paid lists nothing.
		bts := ofPath(m.exchanges(), http.MethodGet, "/v1/balance_transactions")
		require.Len(t, bts, 1, "reconciliation_completed lists, the manual payout does not: %v", bts)
		require.Equal(t, url.Values{"payout": {poRecon}, "limit": {"100"}, "expand[0]": {"data.source"}}, bts[0].Query)
		require.Zero(t, m.requested(http.MethodGet, "/v1/payment_intents/"+piZeta), "every payment is known: nothing fetched by id")
		require.Equal(t, int64(len(rows)), count(t, db, &models.Payment{}), "no row made")
		m.requireAllAccepted(t, p)
	})
}

// testStripeMockPasses calls the manual-payout availability pass and the
// stuck path's payout search alone.
func testStripeMockPasses(t *testing.T, direct string) {
	stripeMockBinary(t)
	m := proxyStripeMock(t, direct)
	p := newStripeMockProvider(t, m)
	ctx := context.Background()
	const connected = "acct_stripemock_passes"
	until := time.Now().UTC().Truncate(time.Second)
	from := until.Add(-24 * time.Hour)
	lookFrom := from.Add(-2*24*time.Hour - stripe.AvailabilityLookback)
	wantBT := url.Values{"created[gte]": {unixStr(lookFrom)}, "created[lt]": {unixStr(until)}, "limit": {"100"}, "expand[0]": {"data.source"}}

	// stripe-mock's fixture: an available balance transaction whose source
	// is a charge id, and expanded an application fee (stripe-mock expands
	// the first of the types a source may be): no charge, nothing settled.
	plain := m.object(t, "/v1/balance_transactions?created%5Bgte%5D="+unixStr(lookFrom))
	bt0 := firstOf(t, plain, "balance transactions")
	require.Equal(t, "available", bt0["status"])
	require.Equal(t, "ch_1PgafuB7WZ01zgkWXYmPNZs8", bt0["source"], "unexpanded, the source is a charge id")
	expanded := m.object(t, "/v1/balance_transactions?expand%5B%5D=data.source")
	src := mapOf(t, firstOf(t, expanded, "balance transactions")["source"], "expanded source")
	require.Equal(t, "application_fee", src["object"], "stripe-mock's expanded source")
	cs, err := p.SettleAvailable(ctx, "", from, until, 2)
	require.NoError(t, err)
	require.Empty(t, cs, "an application fee settles no payment")

	// A charge's available balance transaction inside the window settles
	// its payment at available_on; one pending, or available before the
	// window (stripe-mock's 2009 available_on), does not.
	charge := m.object(t, "/v1/charges/ch_stripemock_avail")
	require.Equal(t, false, charge["captured"], "stripe-mock's charge is uncaptured")
	charge["captured"], charge["amount"], charge["amount_captured"], charge["payment_intent"] = true, 1099, 1099, "pi_stripemock_avail"
	avail := until.Add(-time.Hour)
	m.setRewrite("/v1/balance_transactions", func(_ url.Values, b map[string]any) {
		fixture := firstOf(t, b, "balance transactions")
		var data []any
		for i, f := range []func(bt map[string]any){
			func(bt map[string]any) { bt["available_on"] = avail.Unix() },
			func(bt map[string]any) { bt["available_on"], bt["status"] = avail.Unix(), "pending" },
			func(bt map[string]any) {}, // available_on 1234567890
		} {
			bt := map[string]any{}
			for k, v := range fixture {
				bt[k] = v
			}
			bt["id"], bt["source"] = fmt.Sprintf("txn_stripemock_%d", i), charge
			f(bt)
			data = append(data, bt)
		}
		b["data"] = data
	})
	cs, err = p.SettleAvailable(ctx, connected, from, until, 2)
	require.NoError(t, err)
	require.Len(t, cs, 1, "%+v", cs)
	c := cs[0]
	require.Equal(t, "pi_stripemock_avail", c.ProviderID)
	require.Equal(t, models.StateSettled, c.State)
	require.True(t, avail.Equal(c.At), "at available_on: %v", c.At)
	require.Equal(t, "available", c.RawStatus)
	require.Equal(t, "reconciler.balance_transaction.available", c.EventType)
	require.Equal(t, reconcile.SyntheticEventID("pi_stripemock_avail", models.StateSettled, avail), c.EventID)
	require.Equal(t, int64(1099), c.Amount)
	require.Equal(t, "usd", c.Currency)
	require.Empty(t, c.PayoutID)
	require.True(t, c.Inferred)
	require.True(t, c.View && c.ViewCurrent, "the expanded charge is a current view of its refunds")
	require.False(t, c.Refunded)
	require.Zero(t, c.AmountRefunded)
	var payload map[string]any
	require.NoError(t, json.Unmarshal(c.Payload, &payload))
	require.Equal(t, "txn_stripemock_0", payload["id"])
	require.Equal(t, "ch_stripemock_avail", payload["source"])
	bts := ofPath(m.exchanges(), http.MethodGet, "/v1/balance_transactions")
	require.Len(t, bts, 2)
	for i, x := range bts {
		require.Equal(t, wantBT, x.Query, "pass %d", i)
		require.Equal(t, []string{"", connected}[i], x.Account)
	}

	// The stuck path's search: paid payouts created in [day, day+35d), no
	// expansion, once per day per fetcher. stripe-mock ignores status and
	// lists its in_transit payout; the search keeps it (the payout's own
	// status is read before it settles anything).
	day := from.Unix() - from.Unix()%86400
	s := p.StuckPayoutSearch("")
	for range 2 {
		ids, err := s.PaidPayoutsFrom(ctx, day)
		require.NoError(t, err)
		require.Equal(t, []string{"po_1Pgc79B7WZ01zgkWu1KToYf4"}, ids)
	}
	ids, err := s.PaidPayoutsFrom(ctx, day-86400)
	require.NoError(t, err)
	require.Len(t, ids, 1)
	ids, err = p.StuckPayoutSearch(connected).PaidPayoutsFrom(ctx, day)
	require.NoError(t, err)
	require.Len(t, ids, 1)
	pos := ofPath(m.exchanges(), http.MethodGet, "/v1/payouts")
	require.Len(t, pos, 3, "the second search of a day is cached")
	for i, d := range []int64{day, day - 86400, day} {
		require.Equal(t, url.Values{"status": {"paid"}, "created[gte]": {fmt.Sprint(d)},
			"created[lt]": {fmt.Sprint(d + int64(stripe.PayoutSearch/time.Second))}, "limit": {"100"}}, pos[i].Query, "search %d", i)
		require.Equal(t, []string{"", "", connected}[i], pos[i].Account)
	}
	require.Zero(t, m.requested(http.MethodGet, "/v1/account"), "neither pass reads the schedule itself")
	m.requireAllAccepted(t, p)
}

// testStripeMockStuckCaptured: a captured row untouched for ten days is
// re-fetched with its charge's refunds and balance transaction. stripe-mock
// answers requires_payment_method with an uncaptured charge, dated 2009:
// nothing moves, no payout or dispute is looked for, and the run records
// what the stuck path checked and cost.
func testStripeMockStuckCaptured(t *testing.T, direct string) {
	bothStores(t, func(t *testing.T, db *pgtest.DB) {
		m := proxyStripeMock(t, direct)
		p := newStripeMockProvider(t, m)
		const id = "pi_stripemock_stuck_captured"
		old := time.Now().UTC().Add(-10 * 24 * time.Hour).Truncate(time.Second)
		before := seedPayment(t, db, models.Payment{ProviderID: id, State: models.StateCaptured, Amount: 1099, SourceUpdatedAt: &old})
		res := runStripeMock(t, db, p, false)
		pis := ofPath(m.exchanges(), http.MethodGet, "/v1/payment_intents/"+id)
		require.Len(t, pis, 1, "the stuck payment was re-fetched by id")
		require.Equal(t, url.Values{"expand[0]": {"latest_charge.refunds"}, "expand[1]": {"latest_charge.balance_transaction"}}, pis[0].Query)
		require.Zero(t, m.requested(http.MethodGet, "/v1/payouts"), "an uncaptured charge has no settlement to look for")
		require.Zero(t, m.requested(http.MethodGet, "/v1/disputes"), "stripe-mock's charge is not disputed")
		require.Len(t, ofPath(m.exchanges(), http.MethodGet, "/v1/account"), 1, "the run's schedule serves the stuck path")
		requireUnchanged(t, db, before)
		for _, it := range driftItems(t, db, res.Run.ID, id) {
			t.Logf("drift item: %s %s local=%v provider=%v %s", it.Kind, it.Action, deref(it.LocalState), deref(it.ProviderState), it.Detail)
		}
		notes := runNotes(t, db, res.Run.ID)
		require.EqualValues(t, 1, notes["stuck_checked"], "notes %v", notes)
		require.EqualValues(t, 1, notes["stuck_api_requests"], "one request: the PaymentIntent; notes %v", notes)
		var checks int64
		require.NoError(t, db.Table("reconciler_checks").Where("provider = ? AND provider_id = ?", stripe.Name, id).Count(&checks).Error)
		require.Equal(t, int64(1), checks, "the payment waits its turn behind the others next run")
		m.requireAllAccepted(t, p)
	})
}

// testStripeMockStuckSettles: stripe-mock's answers rewritten into a
// succeeded PaymentIntent whose disputed, captured charge's funds became
// available two days ago, and a paid payout (stripe-mock's) that paid it
// out yesterday: the stuck path searches the paid payouts from the day of
// availability, reads the payout and its balance transactions, and the
// charge's disputes. Every one of those requests is stripe-mock's to
// validate; the row is settled by that payout, and the open dispute is a
// 'dispute' item.
func testStripeMockStuckSettles(t *testing.T, direct string) {
	bothStores(t, func(t *testing.T, db *pgtest.DB) {
		m := proxyStripeMock(t, direct)
		p := newStripeMockProvider(t, m)
		const (
			id     = "pi_stripemock_stuck_settles"
			payout = "po_1Pgc79B7WZ01zgkWu1KToYf4" // stripe-mock's listed payout
		)
		now := time.Now().UTC().Truncate(time.Second)
		captured, avail, arrival := now.Add(-4*24*time.Hour), now.Add(-2*24*time.Hour), now.Add(-24*time.Hour)
		charge := m.object(t, "/v1/charges/ch_stripemock_stuck")
		charge["captured"], charge["amount"], charge["amount_captured"], charge["payment_intent"] = true, 1099, 1099, id
		m.setRewrite("/v1/payment_intents/"+id, func(_ url.Values, b map[string]any) {
			b["status"] = "succeeded"
			ch := mapOf(t, b["latest_charge"], "latest_charge (expanded)")
			ch["captured"], ch["amount"], ch["amount_captured"], ch["payment_intent"], ch["disputed"] = true, 1099, 1099, id, true
			bt := mapOf(t, ch["balance_transaction"], "latest_charge.balance_transaction (expanded)")
			assert.Equal(t, "available", bt["status"], "stripe-mock's balance transaction")
			bt["created"], bt["available_on"] = captured.Unix(), avail.Unix()
			refunds := mapOf(t, ch["refunds"], "latest_charge.refunds (expanded)")
			assert.Equal(t, "list", refunds["object"])
		})
		m.setRewrite("/v1/payouts/"+payout, func(_ url.Values, b map[string]any) {
			assert.Equal(t, "in_transit", b["status"], "stripe-mock's payout")
			b["status"], b["arrival_date"] = "paid", arrival.Unix()
		})
		m.setRewrite("/v1/balance_transactions", func(q url.Values, b map[string]any) {
			assert.Equal(t, payout, q.Get("payout"))
			bt := firstOf(t, b, "balance transactions")
			bt["source"] = charge
		})
		old := now.Add(-10 * 24 * time.Hour)
		seedPayment(t, db, models.Payment{ProviderID: id, State: models.StateCaptured, Amount: 1099, SourceUpdatedAt: &old})

		res := runStripeMock(t, db, p, false)
		xs := m.exchanges()
		pis := ofPath(xs, http.MethodGet, "/v1/payment_intents/"+id)
		require.Len(t, pis, 1)
		require.Equal(t, []string{"latest_charge.refunds", "latest_charge.balance_transaction"}, expands(pis[0].Query))
		day := avail.Unix() - avail.Unix()%86400
		search := ofPath(xs, http.MethodGet, "/v1/payouts")
		require.Len(t, search, 1)
		require.Equal(t, url.Values{"status": {"paid"}, "created[gte]": {fmt.Sprint(day)},
			"created[lt]": {fmt.Sprint(day + int64(stripe.PayoutSearch/time.Second))}, "limit": {"100"}}, search[0].Query)
		got := ofPath(xs, http.MethodGet, "/v1/payouts/"+payout)
		require.Len(t, got, 1)
		require.Empty(t, got[0].Query)
		bts := ofPath(xs, http.MethodGet, "/v1/balance_transactions")
		require.Len(t, bts, 1)
		require.Equal(t, url.Values{"payout": {payout}, "limit": {"100"}, "expand[0]": {"data.source"}}, bts[0].Query)
		ds := ofPath(xs, http.MethodGet, "/v1/disputes")
		require.Len(t, ds, 1, "the disputed charge's disputes")
		require.Equal(t, url.Values{"payment_intent": {id}, "limit": {"100"}}, ds[0].Query)

		row := paymentRow(t, db, id)
		require.Equal(t, models.StateSettled, row.State, "settled by the payout that paid it out")
		require.NotNil(t, row.PayoutID)
		require.Equal(t, payout, *row.PayoutID)
		require.NotNil(t, row.SettledAt)
		require.True(t, arrival.Equal(*row.SettledAt), "at the payout's arrival_date: %v", row.SettledAt)
		var dispute []models.DriftItem
		for _, it := range driftItems(t, db, res.Run.ID, id) {
			t.Logf("drift item: %s %s local=%v provider=%v", it.Kind, it.Action, deref(it.LocalState), deref(it.ProviderState))
			if it.Kind == models.KindDispute {
				dispute = append(dispute, it)
			}
		}
		require.Len(t, dispute, 1, "stripe-mock's dispute (warning_needs_response) is open")
		require.Equal(t, models.ActionReported, dispute[0].Action)
		require.Equal(t, "dispute_warning_needs_response", deref(dispute[0].ProviderState))
		notes := runNotes(t, db, res.Run.ID)
		require.EqualValues(t, 1, notes["stuck_checked"], "notes %v", notes)
		require.EqualValues(t, 5, notes["stuck_api_requests"],
			"the PaymentIntent, the payout search, the payout, its balance transactions, the disputes; notes %v", notes)
		m.requireAllAccepted(t, p)
	})
}
