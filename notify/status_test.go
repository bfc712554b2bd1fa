package notify

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
)

// A run that did not finish says so first, in the header and in the
// fallback text a notification shows, never as if it were a clean run; the
// miss ratio it could not measure is "—", not 0.00%.
func TestMessageSaysARunFailed(t *testing.T) {
	for _, tc := range []struct {
		status, says string
	}{
		{models.RunFailed, "Reconciliation run 42 FAILED: stripe, acct_9"},
		{models.RunInterrupted, "Reconciliation run 42 was INTERRUPTED: stripe, acct_9"},
	} {
		t.Run(tc.status, func(t *testing.T) {
			rr := sampleRun(0)
			rr.Status, rr.EventsRead, rr.WebhookMissRatio = tc.status, 0, 0
			boom := "list stripe events: <500> & gave up"
			rr.Error = &boom
			b, err := Message(rr, "")
			require.NoError(t, err)
			m := decode(t, b)
			texts := texts(t, m)
			first, _, _ := strings.Cut(texts[1], "\n") // texts[0] is the fallback
			assert.Equal(t, "*"+tc.says+"*", first)
			assert.True(t, strings.HasPrefix(m["text"].(string), tc.says), m["text"])
			all := strings.Join(texts, "\n")
			assert.Contains(t, all, "did not finish")
			assert.Contains(t, all, "Error: list stripe events: &lt;500&gt; &amp; gave up")
			assert.Contains(t, all, "*Webhook miss ratio*\n—")
			assert.NotContains(t, all, "0.00%")
			assert.NotContains(t, all, "Nothing needs a human.")
			assert.Contains(t, all, "the rest of the window was not checked")
		})
	}
	// A failed run with a ratio recorded still shows "—": its counts are partial.
	rr := sampleRun(1)
	rr.Status = models.RunFailed
	b, err := Message(rr, "")
	require.NoError(t, err)
	assert.NotContains(t, strings.Join(texts(t, decode(t, b)), "\n"), "2.50%")

	// A clean run that read no events measured no ratio either.
	rr = sampleRun(0)
	rr.EventsRead, rr.WebhookMissRatio = 0, 0
	b, err = Message(rr, "")
	require.NoError(t, err)
	all := strings.Join(texts(t, decode(t, b)), "\n")
	assert.Contains(t, all, "*Webhook miss ratio*\n—")
	assert.Contains(t, all, "Nothing needs a human.")
	assert.NotContains(t, all, "FAILED")
	assert.NotContains(t, all, "did not finish")
}
