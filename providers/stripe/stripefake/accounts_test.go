package stripefake

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
)

func TestListAccountsPagesEveryConnectedAccount(t *testing.T) {
	s, api := newAPI(t)
	s.Account("") // the platform is never listed
	var want []string
	for i := range 250 {
		id := fmt.Sprintf("acct_1List%03d", i)
		s.Account(id)
		want = append(want, id)
	}
	slices.Sort(want)

	params := &stripe.AccountListParams{}
	params.Limit = stripe.Int64(100)
	it := api.Accounts.List(params)
	var got []string
	for it.Next() {
		a := it.Account()
		require.Equal(t, "account", string(a.Object))
		got = append(got, a.ID)
	}
	require.NoError(t, it.Err())
	require.Equal(t, want, got)
	require.Equal(t, int64(3), s.RequestsByPath()["/v1/accounts"], "250 accounts are three pages of 100")

	// ending_before pages backwards; an unknown cursor is Stripe's 400.
	params = &stripe.AccountListParams{}
	params.Limit = stripe.Int64(10)
	params.EndingBefore = stripe.String(want[5])
	params.Single = true
	it = api.Accounts.List(params)
	got = nil
	for it.Next() {
		got = append(got, it.Account().ID)
	}
	require.NoError(t, it.Err())
	// stripe-go walks an ending_before list backwards, from the cursor.
	require.Equal(t, []string{want[4], want[3], want[2], want[1], want[0]}, got)
	params = &stripe.AccountListParams{}
	params.StartingAfter = stripe.String("acct_1Nope")
	it = api.Accounts.List(params)
	require.False(t, it.Next())
	var se *stripe.Error
	require.ErrorAs(t, it.Err(), &se)
	require.Equal(t, 400, se.HTTPStatusCode)
	require.Contains(t, se.Msg, "No such account")

	// A connected account lists no accounts of its own.
	params = &stripe.AccountListParams{}
	params.SetStripeAccount(want[0])
	it = api.Accounts.List(params)
	require.False(t, it.Next())
	require.NoError(t, it.Err())
}

func TestFailAccountFailsOnlyThatAccount(t *testing.T) {
	s, api := newAPI(t)
	ok, bad := s.Account("acct_1Fine"), s.Account("acct_1Broken")
	ok.CreatePayment(100, "gbp", false, fixedNow().Add(-time.Hour))
	bad.CreatePayment(100, "gbp", false, fixedNow().Add(-time.Hour))
	s.FailAccount("acct_1Broken", 503)

	list := func(acct string) error {
		p := &stripe.PaymentIntentListParams{}
		p.SetStripeAccount(acct)
		it := api.PaymentIntents.List(p)
		for it.Next() {
		}
		return it.Err()
	}
	require.NoError(t, list("acct_1Fine"))
	require.NoError(t, list(""))
	var se *stripe.Error
	require.ErrorAs(t, list("acct_1Broken"), &se)
	require.Equal(t, 503, se.HTTPStatusCode)

	s.FailAccount("acct_1Broken", 0)
	require.NoError(t, list("acct_1Broken"))
}
