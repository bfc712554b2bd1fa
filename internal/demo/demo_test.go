package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
)

func options(t *testing.T, dir string) (Options, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	return Options{Payments: 40, Seed: 3, DBPath: filepath.Join(dir, "demo.db"), HTMLPath: filepath.Join(dir, "demo.html"), Stdout: &out}, &out
}

// flat collapses line breaks and indentation: the demo wraps its text at
// the terminal's width.
func flat(s string) string { return strings.Join(strings.Fields(s), " ") }

// A kept database: the first demo seeds it, the second reruns the same
// window and repairs nothing, a third with other values is refused before
// any output.
func TestDemoKeptDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o, out := options(t, dir)
	require.NoError(t, Run(context.Background(), o))
	text := out.String()
	for _, want := range []string{
		"reconciler demo: a fake Stripe and a fake GoCardless on 127.0.0.1, 40 generated payments each (seed 3)",
		"Local database: " + o.DBPath + " (new; kept).",
		"── Stripe · run 1 · test mode · succeeded in ", "── Stripe · " + ManualAccount + " · run 2 · test mode · succeeded in ",
		"── Stripe · " + NewerAccount + " · run 3 · test mode · succeeded in ", "── GoCardless · run 4 · test mode · succeeded in ",
		// Stripe as it really behaves, each with the sentence support reads.
		"the 30.00 GBP released went back to the customer and is not a refund",
		"that paid this payment out failed at Stripe after it was paid",
		"is open and Stripe withdrew 40.00 GBP",
		"failed at Stripe, but the payment's amount_refunded counts it",
		"captured → settled", // the manual-payout account, settled at availability
		"api_version 2031-01-01.zeta",
		// GoCardless as it really behaves.
		"settled → payout_bounced", "settled → refund_failed", "refund action reversed",
		"Needs a human (", "    …and ", " more repaired",
		"HTML report: " + o.HTMLPath, "fresh local database", "file://" + filepath.ToSlash(o.HTMLPath), "Finished in ",
	} {
		// Explanations wrap at the terminal's width: compare with the
		// line breaks and their indentation collapsed.
		require.Contains(t, flat(text), flat(want))
	}
	require.NotContains(t, text, "\033[", "no colour unless asked")
	page, err := os.ReadFile(o.HTMLPath)
	require.NoError(t, err)
	require.Contains(t, string(page), "<svg")

	out.Reset()
	o.Color = true
	require.NoError(t, Run(context.Background(), o))
	text = out.String()
	require.Contains(t, flat(text), "which already held this demo: the runs below are reruns of the same window.")
	require.Contains(t, flat(text), "so every run was a rerun of the same window")
	require.Contains(t, text, "\033[1mWhat just happened\033[0m", "colour when asked")
	require.Equal(t, 4, strings.Count(text, "\033[32mrepaired\033[0m 0   "), "a rerun repairs nothing")

	out.Reset()
	o.Payments, o.HTMLPath = 41, filepath.Join(dir, "other.html")
	err = Run(context.Background(), o)
	var oe *OptionError
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, "db", oe.Option)
	require.Equal(t, o.DBPath+" holds a demo made with other --payments or --seed values (or one that did not finish); pass the same values or give a new file", oe.Err.Error())
	require.Empty(t, out.String(), "nothing written")
	require.NoFileExists(t, o.HTMLPath, "no page left behind by a failed demo")
}

// A throwaway database by default, gone when Run returns; the clock is
// Options.Now.
func TestDemoThrowawayDatabase(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the throwaway file goes
	o, out := options(t, t.TempDir())
	o.DBPath, o.Payments = "", 0
	calls := 0
	o.Now = func() time.Time { calls++; return time.Now() }
	require.NoError(t, Run(context.Background(), o))
	require.Contains(t, out.String(), "Local database: a fresh throwaway file, deleted on exit (--db FILE keeps one).")
	require.Contains(t, out.String(), ", 0 generated payments each (seed 3)")
	require.Contains(t, out.String(), "Needs a human (", "the crafted payments still drift")
	require.NotZero(t, calls, "the clock is injected")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "no database left behind")
}

// A database the demo did not make is refused, and left as it was.
func TestDemoForeignDatabase(t *testing.T) {
	t.Parallel()
	o, out := options(t, t.TempDir())
	db, err := openDB(context.Background(), o.DBPath)
	require.NoError(t, err)
	require.NoError(t, db.Create(&models.Payment{Provider: "stripe", ProviderID: "pi_mine", State: models.State("captured"), Amount: 100, Currency: "gbp"}).Error)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	require.NoError(t, sqlDB.Close())

	err = Run(context.Background(), o)
	var oe *OptionError
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, "db", oe.Option)
	require.Equal(t, "db: "+o.DBPath+" holds 1 payments the demo did not make; give a new file", oe.Error())
	require.Empty(t, out.String())
	require.NoFileExists(t, o.HTMLPath)
}

func TestDemoOptionsValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := Options{Payments: 500, Seed: 1, HTMLPath: "x.html"}
	require.NoError(t, ok.Validate())
	for _, c := range []struct {
		change func(*Options)
		option string
		msg    string
	}{
		{func(o *Options) { o.Payments = -1 }, "payments", "-1 is out of range (0 to 100000)"},
		{func(o *Options) { o.Payments = MaxPayments + 1 }, "payments", "100001 is out of range (0 to 100000)"},
		{func(o *Options) { o.Seed = -3 }, "seed", "-3 is negative (use 0 or more)"},
		{func(o *Options) { o.HTMLPath = "" }, "html", "needs a file name"},
		{func(o *Options) { o.DBPath = dir }, "db", dir + " is a directory, not a database file"},
		{func(o *Options) { o.DBPath = filepath.Join(dir, "missing", "x.db") }, "db", "no such file or directory"},
	} {
		o := ok
		c.change(&o)
		err := o.Validate()
		var oe *OptionError
		require.True(t, errors.As(err, &oe), "%v", err)
		require.Equal(t, c.option, oe.Option)
		require.Contains(t, oe.Err.Error(), c.msg)
	}
	o := ok
	o.HTMLPath = filepath.Join(dir, "missing", "x.html")
	err := Run(context.Background(), o)
	var oe *OptionError
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, "html", oe.Option, "an HTML file that cannot be created is the caller's to fix")
}

// The demo's items are each something a person should read: none on a
// payment whose row already matched the provider (no "failed → failed"), and
// each says one plain thing, without a provider status or an empty
// explanation. The default-size demo, both providers.
func TestDemoItemsArePlain(t *testing.T) {
	t.Parallel()
	o, _ := options(t, t.TempDir())
	o.Payments = 500
	require.NoError(t, Run(context.Background(), o))
	db, err := openDB(context.Background(), o.DBPath)
	require.NoError(t, err)
	defer func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}()
	var items []models.DriftItem
	require.NoError(t, db.Find(&items).Error)
	require.NotEmpty(t, items)
	for _, it := range items {
		local, prov := "", ""
		if it.LocalState != nil {
			local = *it.LocalState
		}
		if it.ProviderState != nil {
			prov = *it.ProviderState
		}
		var d map[string]any
		require.NoError(t, json.Unmarshal(it.Detail, &d))
		_, refundRaised := d["amount_refunded_to"]
		if it.Kind != models.KindMismatch && it.Kind != models.KindDispute && it.Kind != models.KindUnknownStatus && !refundRaised {
			require.NotEqual(t, local, prov, "%s %s: an item on a row that already matches: %s/%s %s", it.Provider, it.ProviderID, it.Kind, it.Action, it.Detail)
		}
		expl, _ := d["explanation"].(string)
		require.NotEmpty(t, expl, "%s %s: no explanation", it.Provider, it.ProviderID)
		require.NotContains(t, expl, "\n", "%s %s: one paragraph", it.Provider, it.ProviderID)
		require.True(t, strings.HasSuffix(strings.TrimSpace(expl), "."), "%s %s: a sentence: %q", it.Provider, it.ProviderID, expl)
	}
}

// cancelOn is a progress writer that cancels the demo a moment after a
// phase whose line contains phase begins, and says when.
type cancelOn struct {
	phase    string
	after    time.Duration
	cancel   context.CancelFunc
	mu       sync.Mutex
	lines    []string
	canceled chan time.Time
}

func (c *cancelOn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, string(b))
	if strings.Contains(string(b), c.phase) {
		time.AfterFunc(c.after, func() {
			c.cancel()
			c.canceled <- time.Now()
		})
		c.phase = "\x00" // once
	}
	return len(b), nil
}

// Ctrl-C is honoured within a second or two wherever it comes: while the
// database is seeded, and in the middle of a reconciliation (the batch in
// flight is written, nothing more); the error says the demo was
// interrupted, nothing is reported and no HTML page is left behind.
func TestDemoStopsSoonWhenCanceled(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 5,000 payments")
	}
	t.Parallel()
	for _, c := range []struct{ phase string }{
		{"seeding the local database"},
		{"reconciling Stripe"},
		{"reconciling GoCardless"},
	} {
		t.Run(c.phase, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &cancelOn{phase: c.phase, after: 300 * time.Millisecond, cancel: cancel, canceled: make(chan time.Time, 1)}
			o, out := options(t, t.TempDir())
			o.DBPath, o.Payments = "", 5000
			o.Progress = NewProgress(w, false)
			err := Run(ctx, o)
			returned := time.Now()
			require.ErrorIs(t, err, context.Canceled)
			require.Contains(t, err.Error(), "demo interrupted")
			select {
			case at := <-w.canceled:
				took := returned.Sub(at)
				t.Logf("returned %v after the cancel", took)
				require.Less(t, took, 2*time.Second, "Ctrl-C honoured within a second or two")
			default:
				t.Fatalf("the demo ended before it was canceled: %v", w.lines)
			}
			require.Empty(t, out.String(), "no report")
			require.NoFileExists(t, o.HTMLPath)
		})
	}
}

// The progress lines say each phase as it begins; a live terminal's line is
// rewritten in place and always ended before anything else is written.
func TestDemoProgress(t *testing.T) {
	t.Parallel()
	var plain bytes.Buffer
	o, _ := options(t, t.TempDir())
	o.DBPath = ""
	o.Progress = NewProgress(&plain, false)
	require.NoError(t, Run(context.Background(), o))
	var phases []string
	for _, l := range strings.Split(strings.TrimSuffix(plain.String(), "\n"), "\n") {
		require.Regexp(t, `^\[ *\d+\.\ds\] `, l)
		phases = append(phases, l[strings.Index(l, "] ")+2:])
	}
	require.Equal(t, []string{
		"generating 40 payments on a fake Stripe and a fake GoCardless",
		phases[1], // the deliveries' count depends on the generator
		"reconciling Stripe",
		"reconciling Stripe " + ManualAccount,
		"reconciling Stripe " + NewerAccount,
		"reconciling GoCardless",
		"writing the report",
	}, phases)
	require.Regexp(t, `^seeding the local database with \d+ webhook deliveries$`, phases[1])
	require.Len(t, o.Progress.Phases(), len(phases), "every phase timed")

	var live bytes.Buffer
	p := NewProgress(&live, true)
	p.begin(time.Now)
	p.phase("seeding")
	p.drawn = time.Time{} // the next update draws at once
	p.update("%d done", 3)
	_, err := fmt.Fprintf(p, "level=WARN msg=careful\n")
	require.NoError(t, err)
	p.phase("reconciling")
	p.done()
	text := live.String()
	require.Contains(t, text, "\r\033[K[  0.0s] seeding: 3 done\nlevel=WARN msg=careful\n", "a log line ends the progress line first")
	require.Contains(t, text, "careful\n\r\033[K[  0.0s] seeding: 3 done (0.0s)\n", "a finished phase's line keeps its counts and says its time")
	require.Regexp(t, `\r\033\[K\[  0\.0s\] reconciling \(0\.0s\)\n$`, text, "the last line is closed with its time")
}
