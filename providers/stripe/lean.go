package stripe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/form"
)

// The event path decodes only the fields the mapping reads, straight from
// each event's raw JSON, which it also keeps as the webhook_events payload.
// stripe-go's own Event type decodes every event twice (into a map and the
// raw bytes) and its typed objects carry hundreds of fields; at a million
// events a night that decoding was most of the job's CPU. The requests still
// go through stripe-go's backend (authentication, headers, errors) and its
// list iterator (cursors, has_more).

// leanEvent is an event with only what the engine needs.
type leanEvent struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
	raw json.RawMessage
}

// leanEventList is a page of /v1/events, each event kept raw.
type leanEventList struct {
	stripego.APIResource
	stripego.ListMeta
	Data []json.RawMessage `json:"data"`
}

// expandable is an id that may come expanded into an object.
type expandable string

func (e *expandable) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] == 'n' {
		*e = ""
		return nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*e = expandable(s)
		return nil
	}
	var o struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	*e = expandable(o.ID)
	return nil
}

func (e expandable) pi() *stripego.PaymentIntent {
	if e == "" {
		return nil
	}
	return &stripego.PaymentIntent{ID: string(e)}
}

type leanPI struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

func (l leanPI) typed() *stripego.PaymentIntent {
	return &stripego.PaymentIntent{ID: l.ID, Amount: l.Amount, Currency: stripego.Currency(l.Currency), Status: stripego.PaymentIntentStatus(l.Status)}
}

type leanCharge struct {
	ID             string     `json:"id"`
	Amount         int64      `json:"amount"`
	AmountRefunded int64      `json:"amount_refunded"`
	Captured       bool       `json:"captured"`
	Refunded       bool       `json:"refunded"`
	Currency       string     `json:"currency"`
	PaymentIntent  expandable `json:"payment_intent"`
}

func (l leanCharge) typed() *stripego.Charge {
	return &stripego.Charge{ID: l.ID, Amount: l.Amount, AmountRefunded: l.AmountRefunded, Captured: l.Captured, Refunded: l.Refunded,
		Currency: stripego.Currency(l.Currency), PaymentIntent: l.PaymentIntent.pi()}
}

type leanRefund struct {
	ID            string     `json:"id"`
	Amount        int64      `json:"amount"`
	Currency      string     `json:"currency"`
	Status        string     `json:"status"`
	PaymentIntent expandable `json:"payment_intent"`
}

func (l leanRefund) typed() *stripego.Refund {
	return &stripego.Refund{ID: l.ID, Amount: l.Amount, Currency: stripego.Currency(l.Currency), Status: stripego.RefundStatus(l.Status), PaymentIntent: l.PaymentIntent.pi()}
}

type leanDispute struct {
	ID            string     `json:"id"`
	Status        string     `json:"status"`
	PaymentIntent expandable `json:"payment_intent"`
}

func (l leanDispute) typed() *stripego.Dispute {
	return &stripego.Dispute{ID: l.ID, Status: stripego.DisputeStatus(l.Status), PaymentIntent: l.PaymentIntent.pi()}
}

// leanBT is a balance transaction with its source expanded.
type leanBT struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Source struct {
		Object string `json:"object"`
		leanCharge
	} `json:"source"`
}

type leanBTList struct {
	stripego.APIResource
	stripego.ListMeta
	Data []*leanBT `json:"data"`
}

// eventIter lists events through stripe-go's backend and list iterator,
// decoding each event leanly.
func (p *Provider) eventIter(params *stripego.EventListParams) *stripego.Iter {
	return stripego.GetIter(params, func(sp *stripego.Params, b *form.Values) ([]interface{}, stripego.ListContainer, error) {
		list := &leanEventList{}
		err := p.api.Events.B.CallRaw(http.MethodGet, "/v1/events", p.api.Events.Key, b, sp, list)
		if err != nil {
			return nil, list, err
		}
		out := make([]interface{}, len(list.Data))
		for i, raw := range list.Data {
			ev := &leanEvent{raw: raw}
			if err := json.Unmarshal(raw, ev); err != nil {
				return nil, list, fmt.Errorf("decode stripe event: %w", err)
			}
			if ev.ID == "" {
				return nil, list, fmt.Errorf("stripe event without an id in a list page")
			}
			out[i] = ev
		}
		return out, list, nil
	})
}

// btIter lists a payout's balance transactions with their sources.
func (p *Provider) btIter(params *stripego.BalanceTransactionListParams) *stripego.Iter {
	return stripego.GetIter(params, func(sp *stripego.Params, b *form.Values) ([]interface{}, stripego.ListContainer, error) {
		list := &leanBTList{}
		err := p.api.BalanceTransactions.B.CallRaw(http.MethodGet, "/v1/balance_transactions", p.api.BalanceTransactions.Key, b, sp, list)
		out := make([]interface{}, len(list.Data))
		for i, v := range list.Data {
			out[i] = v
		}
		return out, list, err
	})
}
