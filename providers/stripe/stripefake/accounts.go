package stripefake

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// accountFaults answers every request made on behalf of some connected
// accounts (Stripe-Account header) with an error status.
type accountFaults struct {
	mu     sync.Mutex
	status map[string]int
}

// FailAccount makes every request carrying Stripe-Account: id fail with
// status (401, 403, 429, 500, 503, ...) and Stripe's error JSON, as long as
// it is set; status 0 clears it. Other accounts are unaffected, so a test can
// fail one connected account among many. The injected failures honour
// SetShouldRetryHeader like the others.
func (s *Server) FailAccount(id string, status int) {
	f := &s.acctFaults
	f.mu.Lock()
	defer f.mu.Unlock()
	if status == 0 {
		delete(f.status, id)
		return
	}
	if f.status == nil {
		f.status = map[string]int{}
	}
	f.status[id] = status
}

// accountFailure is the status FailAccount set for the request's account,
// or 0.
func (s *Server) accountFailure(r *http.Request) int {
	id := strings.TrimSpace(r.Header.Get("Stripe-Account"))
	if id == "" {
		return 0
	}
	f := &s.acctFaults
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status[id]
}

// connectedAccountIDs returns every connected account the fake holds (every
// id passed to Account, or named in a Stripe-Account header, but the
// platform ""), sorted.
func (s *Server) connectedAccountIDs() []string {
	s.accMu.Lock()
	defer s.accMu.Unlock()
	ids := make([]string, 0, len(s.accounts))
	for id := range s.accounts {
		if id != "" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// listAccounts serves GET /v1/accounts: the platform's connected accounts as
// a Stripe list, limit and starting_after / ending_before paging, in a
// stable order (by id: the fake keeps no creation time for accounts).
// Called on behalf of a connected account (Stripe-Account header), it lists
// nothing, as an account has no connected accounts of its own.
func (s *Server) listAccounts(a *Account, _ string, q url.Values, _ request) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	var ids []string
	if a.ID() == "" {
		ids = s.connectedAccountIDs()
	}
	lo, hi := 0, len(ids)
	if id, param, before := p.cursorID(); id != "" {
		i, found := slices.BinarySearch(ids, id)
		if !found {
			e := notFound("account", id, param)
			e.status = 400
			return nil, e
		}
		if before {
			hi = i
		} else {
			lo = i + 1
		}
	}
	var page []string
	hasMore := false
	if _, _, before := p.cursorID(); before {
		// ending_before: the limit accounts just before the cursor.
		start := max(lo, hi-p.limit)
		page, hasMore = ids[start:hi], start > lo
	} else {
		end := min(hi, lo+p.limit)
		page, hasMore = ids[lo:end], end < hi
	}
	b := make([]byte, 0, 64+len(page)*160)
	b = append(b, `{"object":"list","data":[`...)
	for k, id := range page {
		if k > 0 {
			b = append(b, ',')
		}
		b = appendStr(append(b, `{"id":`...), id)
		b = appendStrField(b, "object", "account")
		b = appendStrField(b, "type", "express")
		b = appendBool(b, "charges_enabled", true)
		b = appendBool(b, "payouts_enabled", true)
		b = appendBool(b, "details_submitted", true)
		b = appendStrField(b, "country", "GB")
		b = appendStrField(b, "default_currency", "gbp")
		b = append(b, '}')
	}
	b = append(b, `],"has_more":`...)
	if hasMore {
		b = append(b, "true"...)
	} else {
		b = append(b, "false"...)
	}
	b = appendStrField(b, "url", "/v1/accounts")
	return append(b, "}\n"...), nil
}

// platformID is the id GET /v1/account shows for the platform account.
func (a *Account) platformID() string {
	if a.id != "" {
		return a.id
	}
	b := []byte("acct_1")
	x := a.ids.key
	for i := 0; i < 15; i++ {
		b = append(b, base62[x%62])
		x /= 62
		if i == 7 {
			x = a.ids.key ^ 0x9E3779B97F4A7C15
		}
	}
	return string(b)
}

// appendAccountObj renders the account in Stripe's Account shape, with its
// payout schedule: manual with the SetManualPayouts delay, else daily with
// 2 days' delay.
func (a *Account) appendAccountObj(b []byte) []byte {
	a.mu.RLock()
	manual, delay := a.manual, a.delayDays
	a.mu.RUnlock()
	typ := "standard"
	if a.id != "" {
		typ = "express"
	}
	interval := "daily"
	if manual {
		interval = "manual"
	} else {
		delay = 2
	}
	b = appendStr(append(b, `{"id":`...), a.platformID())
	b = appendStrField(b, "object", "account")
	b = append(appendKey(b, "business_type"), "null"...)
	b = appendBool(b, "charges_enabled", true)
	b = appendStrField(b, "country", "GB")
	b = appendStrField(b, "default_currency", "gbp")
	b = appendBool(b, "details_submitted", true)
	b = appendBool(b, "payouts_enabled", true)
	b = appendKey(b, "settings")
	b = append(b, `{"payouts":{"debit_negative_balances":false,"schedule":{"delay_days":`...)
	b = strconv.AppendInt(b, delay, 10)
	b = appendStrField(b, "interval", interval)
	b = append(b, `},"statement_descriptor":null}}`...)
	b = appendStrField(b, "type", typ)
	return append(b, "}\n"...)
}

// getAccount serves GET /v1/account: the platform account, or the
// connected account of the Stripe-Account header.
func getAccount(a *Account, _ string, q url.Values, _ request) ([]byte, *apiError) {
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	return a.appendAccountObj(nil), nil
}

// getAccountByID serves GET /v1/accounts/{id} (stripe-go's
// Accounts.GetByID): a connected account the fake holds, or the platform's
// own id; anything else is a 404.
func (s *Server) getAccountByID(a *Account, id string, q url.Values, _ request) ([]byte, *apiError) {
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	if id == a.platformID() {
		return a.appendAccountObj(nil), nil
	}
	s.accMu.Lock()
	acc, ok := s.accounts[id]
	s.accMu.Unlock()
	if !ok || a.ID() != "" || id == "" {
		return nil, notFound("account", id, "account")
	}
	return acc.appendAccountObj(nil), nil
}
