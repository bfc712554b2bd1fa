package stripe

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fastjson"

	"github.com/reconciler/reconciler/models"
)

func TestVersionDate(t *testing.T) {
	for v, want := range map[string]string{
		"":                    pinnedDate,
		"2023-10-16":          "2023-10-16",
		"2018-11-08":          "2018-11-08",
		"2024-10-28.acacia":   "2024-10-28",
		"2025-03-31.basil":    "2025-03-31",
		"2026-07-29.dahlia":   "2026-07-29",
		"2026-08-26.dahlia":   "2026-08-26",
		"2026-09-30.endive":   "", // a major release whose changes no source lists
		"2031-01-01.zeta":     "",
		"2026-02-25.preview":  "",
		"2023-10-16; beta=v1": "",
		"latest":              "",
		"2010-01-01":          "",
	} {
		got, ok := versionDate(v)
		if got != want || ok != (want != "") {
			t.Errorf("versionDate(%q) = %q, %v; want %q", v, got, ok, want)
		}
	}
}

// event builds a listed event of type typ in version v around obj.
func event(t *testing.T, typ, version, obj string) *leanEvent {
	t.Helper()
	v := ""
	if version != "" {
		v = fmt.Sprintf(`"api_version":%q,`, version)
	}
	raw := fmt.Sprintf(`{"id":"evt_1","object":"event",%s"created":1700000000,"type":%q,"data":{"object":%s}}`, v, typ, obj)
	var p fastjson.Parser
	val, err := p.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ev := &leanEvent{raw: val.MarshalTo(nil)}
	if err := parseEvent(val, ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestMapEventByVersionAndKind maps one event of each shape issue 13 named,
// as Stripe renders it (docs/providers/stripe.md, sections 0, 1, 12, 13, 17,
// 19).
func TestMapEventByVersionAndKind(t *testing.T) {
	p, err := New(Config{APIKey: "sk_test_x"})
	if err != nil {
		t.Fatal(err)
	}
	const partial = `{"id":"ch_1","object":"charge","amount":1000,"amount_captured":700,"amount_refunded":%d,"captured":true,"refunded":false,"currency":"gbp","payment_intent":"pi_1"}`
	dispute := func(status string) string {
		return fmt.Sprintf(`{"id":"dp_1","object":"dispute","amount":1000,"currency":"gbp","status":%q,"reason":"fraudulent","payment_intent":"pi_1"}`, status)
	}
	refund := func(status string) string {
		return fmt.Sprintf(`{"id":"re_1","object":"refund","amount":400,"currency":"gbp","status":%q,"payment_intent":"pi_1"}`, status)
	}
	type want struct {
		state    models.State
		unknown  bool
		refunded int64
		captured int64
		notice   string // a substring of Notice
		revert   bool
		ifRef    int64
		raw      string
	}
	cases := []struct {
		name, typ, version, obj string
		want                    want
	}{
		{"pre-2019 status names are renamed, not unknown", "payment_intent.requires_action", "2018-11-08",
			`{"id":"pi_1","object":"payment_intent","amount":1000,"currency":"gbp","status":"requires_source_action"}`,
			want{state: models.StateCreated, raw: "requires_action"}},
		{"an event in a version newer than known is reported, not read", "payment_intent.succeeded", "2031-01-01.zeta",
			`{"id":"pi_1","object":"payment_intent","amount":1000,"currency":"gbp","status":"succeeded"}`,
			want{unknown: true, raw: "api_version 2031-01-01.zeta", notice: "newer than any this reconciler knows"}},
		{"a charge of an unknown version is reported by its payment", "charge.refunded", "2026-09-30.endive", fmt.Sprintf(partial, 300),
			want{unknown: true, raw: "api_version 2026-09-30.endive", notice: "not read"}},
		{"partial capture before basil: the released 300 is no refund, the charge is captured", "charge.refunded", "2023-10-16", fmt.Sprintf(partial, 300),
			want{state: models.StateCaptured, captured: 700, raw: "charge_captured"}},
		{"partial capture before basil with 200 refunded", "charge.refunded", "2024-06-20", fmt.Sprintf(partial, 500),
			want{captured: 700, refunded: 200, raw: "charge_partially_refunded"}},
		{"partial capture in basil: amount_refunded is refunds only", "charge.refunded", "2025-03-31.basil", fmt.Sprintf(partial, 200),
			want{captured: 700, refunded: 200, raw: "charge_partially_refunded"}},
		{"an open dispute is a notice", "charge.dispute.created", "2023-10-16", dispute("needs_response"),
			want{notice: "was opened", raw: "dispute_needs_response"}},
		{"funds withdrawn for an open dispute", "charge.dispute.funds_withdrawn", "2023-10-16", dispute("needs_response"),
			want{notice: "withdrew 10.00 GBP", raw: "dispute_needs_response"}},
		{"funds reinstated", "charge.dispute.funds_reinstated", "2023-10-16", dispute("under_review"),
			want{notice: "reinstated 10.00 GBP", raw: "dispute_under_review"}},
		{"a lost dispute is the chargeback", "charge.dispute.closed", "2023-10-16", dispute("lost"),
			want{state: models.StateChargeback, raw: "dispute_lost"}},
		{"prevented in a version that has it is like won", "charge.dispute.closed", "2025-08-27.basil", dispute("prevented"),
			want{revert: true, raw: "dispute_prevented"}},
		{"prevented in a version without it is unknown", "charge.dispute.closed", "2023-10-16", dispute("prevented"),
			want{unknown: true, raw: "dispute_prevented"}},
		{"refund.failed (acacia) reverts only a row that counted it", "refund.failed", "2024-10-28.acacia", refund("failed"),
			want{revert: true, ifRef: 400, raw: "refund_failed"}},
		{"charge.refund.updated canceled", "charge.refund.updated", "2023-10-16", refund("canceled"),
			want{revert: true, ifRef: 400, raw: "refund_canceled"}},
		{"refund.updated succeeded says nothing the charge does not", "refund.updated", "2024-10-28.acacia", refund("succeeded"), want{}},
		{"a refund status we do not know", "refund.updated", "2024-10-28.acacia", refund("reversed"),
			want{unknown: true, raw: "refund_reversed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs, err := p.mapEvent(context.Background(), "", event(t, c.typ, c.version, c.obj))
			if err != nil {
				t.Fatal(err)
			}
			if c.want == (want{}) {
				if len(cs) != 0 {
					t.Fatalf("changes = %+v, want none", cs)
				}
				return
			}
			if len(cs) != 1 {
				t.Fatalf("changes = %+v, want one", cs)
			}
			g := cs[0]
			if g.ProviderID != "pi_1" || g.State != c.want.state || g.Unknown != c.want.unknown || g.AmountRefunded != c.want.refunded ||
				g.AmountCaptured != c.want.captured || (g.Revert != "") != c.want.revert || g.RevertIfRefunded != c.want.ifRef || g.RawStatus != c.want.raw {
				t.Fatalf("change = %+v, want %+v", g, c.want)
			}
			if !strings.Contains(g.Notice, c.want.notice) {
				t.Fatalf("notice %q lacks %q", g.Notice, c.want.notice)
			}
			if strings.HasPrefix(c.typ, "charge.dispute.") && !c.want.unknown && g.NoticeKind != models.KindDispute {
				t.Fatalf("a dispute fact without the dispute notice kind: %+v", g)
			}
		})
	}
}
