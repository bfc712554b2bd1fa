package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/retry"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/store"
)

// Defaults for Slack's zero fields.
const (
	DefaultChannel     = "slack"
	DefaultMaxAttempts = 5
	// DefaultTimeout bounds one POST (an attempt), unless Client has a
	// Timeout of its own.
	DefaultTimeout = 10 * time.Second
	// DefaultDeadline bounds one delivery: every POST of it and the waits
	// between them.
	DefaultDeadline = 2 * time.Minute
)

// Backoff bounds of the shared retry policy (internal/retry): the wait
// before retry n is about BackoffBase·2^(n-1), ±50% jitter, at most
// BackoffMax·1.5, and at least a 429's Retry-After (seconds or an HTTP
// date) as long as it fits in DefaultDeadline.
const (
	BackoffBase = time.Second
	BackoffMax  = 30 * time.Second
)

// Statuses of a sent_notifications row.
const (
	StatusPending = store.NotificationPending
	StatusSent    = store.NotificationSent
	StatusFailed  = store.NotificationFailed
)

// ErrAttemptsExhausted is returned (wrapped) by Deliver when a run's
// notification already failed MaxAttempts times: nothing is posted.
var ErrAttemptsExhausted = errors.New("delivery attempts exhausted")

// Slack posts a run's summary to a Slack incoming-webhook URL. The URL is a
// secret: it never appears in logs, errors or sent_notifications.last_error.
//
// Attempts: MaxAttempts bounds the total number of HTTP POSTs for one
// (run, channel) across every Deliver call. A Deliver that fails (a 4xx,
// or retries used up) leaves the row failed with the POSTs it made counted
// in attempts; a later Deliver (a rerun) tries again with the attempts that
// remain, and returns ErrAttemptsExhausted without posting once none do.
type Slack struct {
	// URL is the incoming-webhook URL (secret).
	URL string
	// Channel is the sent_notifications channel name, default "slack".
	Channel string
	// Client posts each attempt; default: redirects not followed (each
	// attempt is bounded by DefaultTimeout all the same).
	Client *http.Client
	// MaxAttempts is the total POSTs allowed per (run, channel), default 5.
	MaxAttempts int
	// Sleep waits between retries; default a timer that ctx cancels. Tests inject.
	Sleep func(ctx context.Context, d time.Duration) error
	// Log receives one line per failed attempt and per delivery; default discards.
	Log *slog.Logger
	// ReportLink optionally returns a link or path to the full report; "" omits it.
	ReportLink func(runID int64) string
}

func (s *Slack) channel() string {
	if s.Channel == "" {
		return DefaultChannel
	}
	return s.Channel
}

func (s *Slack) maxAttempts() int {
	if s.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return s.MaxAttempts
}

func (s *Slack) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (s *Slack) logger() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// Deliver sends the run's summary at most once per (run, channel), even
// when the job is retried or rerun, and reports whether this call sent it.
// It is DeliverOn the store of db's dialect.
func (s *Slack) Deliver(ctx context.Context, db *gorm.DB, r report.RunReport) (sent bool, err error) {
	return s.DeliverOn(ctx, dbopen.Store(db, nil), r)
}

// DeliverOn is Deliver through a store's notification record: Post
// without telling a summary posted earlier from a failure.
func (s *Slack) DeliverOn(ctx context.Context, st store.Notifications, r report.RunReport) (sent bool, err error) {
	o, err := s.Post(ctx, st, r)
	return o.Sent, err
}

// Outcome is what a Post came to when it returned no error, or, with
// Sent, when the POST succeeded but recording it failed.
type Outcome struct {
	// Sent: this call posted the summary.
	Sent bool
	// AlreadySent: an earlier delivery posted it; nothing was posted now.
	AlreadySent bool
}

// Post is Deliver through a store's notification record, saying whether
// the summary had been posted before.
//
// It claims the (run, channel) row (store.Notifications: the row is
// created pending when new, and a concurrent Deliver for the same run and
// channel waits until this one has recorded its outcome) and returns
// (false, nil) if the row is already sent. Otherwise it POSTs while holding
// the claim, retrying 5xx, 429 and network errors with exponential backoff
// (never other 4xx), and records status sent with sent_at, or failed with
// attempts and last_error, with the claim.
//
// A failure is returned as an error for the caller to log and count; it
// must never fail the run. If the POST succeeded but recording it failed,
// Post returns Sent and the error: a rerun would then post again.
func (s *Slack) Post(ctx context.Context, st store.Notifications, r report.RunReport) (Outcome, error) {
	channel := s.channel()
	log := s.logger().With("run_id", r.ID, "channel", channel)
	if s.URL == "" {
		return Outcome{}, fmt.Errorf("notify: deliver run %d to %s: webhook URL is not set", r.ID, channel)
	}
	link := ""
	if s.ReportLink != nil {
		link = s.ReportLink(r.ID)
	}
	body, err := Message(r, link)
	if err != nil {
		return Outcome{}, fmt.Errorf("notify: build message for run %d: %w", r.ID, err)
	}

	maxA := s.maxAttempts()
	var (
		claimed, posted bool
		alreadySent     bool
		exhausted       error
		prior, tries    int
		postErr         error
	)
	// The store records what the claim returns even when ctx is cancelled
	// meanwhile, so a POST that succeeded is still recorded; the claim and
	// the POST themselves do use ctx.
	recErr := st.ClaimNotification(ctx, r.ID, channel, func(ctx context.Context, n store.Notification) (*store.NotificationUpdate, error) {
		claimed = true
		if n.Status == StatusSent {
			alreadySent = true
			return nil, nil
		}
		remaining := maxA - n.Attempts
		if remaining <= 0 {
			last := ""
			if n.LastError != nil {
				last = "; last error: " + *n.LastError
			}
			exhausted = fmt.Errorf("notify: deliver run %d to %s: %w (%d of %d used%s)", r.ID, channel,
				ErrAttemptsExhausted, n.Attempts, maxA, last)
			return nil, nil
		}
		prior = n.Attempts
		tries, postErr = s.post(ctx, body, remaining, n.Attempts, maxA, log)
		posted = true
		if postErr == nil {
			return &store.NotificationUpdate{Status: StatusSent, Attempts: tries, Sent: true}, nil
		}
		msg := clip(postErr.Error(), 1000)
		return &store.NotificationUpdate{Status: StatusFailed, Attempts: tries, LastError: &msg}, nil
	})
	switch {
	case !claimed:
		if recErr == nil {
			recErr = errors.New("the store did not claim the row")
		}
		return Outcome{}, fmt.Errorf("notify: claim run %d for %s: %w", r.ID, channel, recErr)
	case alreadySent:
		log.Debug("run summary already sent")
		return Outcome{AlreadySent: true}, nil
	case exhausted != nil:
		return Outcome{}, exhausted
	case !posted:
		return Outcome{}, fmt.Errorf("notify: claim run %d for %s: %w", r.ID, channel, recErr)
	}

	if postErr != nil {
		err := fmt.Errorf("notify: deliver run %d to %s (attempt %d of %d): %w", r.ID, channel, prior+tries, maxA, postErr)
		if recErr != nil {
			err = errors.Join(err, fmt.Errorf("notify: record failure of run %d for %s: %w", r.ID, channel, recErr))
		}
		return Outcome{}, err
	}
	if recErr != nil {
		return Outcome{Sent: true}, fmt.Errorf("notify: run %d was posted to %s but recording it failed (a rerun would post again): %w", r.ID, channel, recErr)
	}
	log.Info("run summary sent", "attempts", prior+tries)
	return Outcome{Sent: true}, nil
}

// post makes up to n POSTs by the shared retry policy (internal/retry:
// 5xx, 429 and network errors are retried with backoff and jitter,
// honouring Retry-After; other 4xx are not) and returns how many it made.
// prior and maxA only label log lines.
func (s *Slack) post(ctx context.Context, body []byte, n, prior, maxA int, log *slog.Logger) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		// The parse error quotes the URL: say only that it is invalid.
		return 1, errors.New("invalid webhook URL")
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	client := s.client()
	policy := retry.Policy{MaxRetries: n - 1, AttemptTimeout: DefaultTimeout, Deadline: DefaultDeadline,
		MinBackoff: BackoffBase, MaxBackoff: BackoffMax, Sleep: s.Sleep}
	if client.Timeout > 0 {
		policy.AttemptTimeout = 0 // the client's own bounds each POST
	}
	tries, described := 0, false
	hooks := retry.Hooks{
		Describe: func(resp *http.Response) string {
			described = true
			return fmt.Sprintf("slack answered %d %s", resp.StatusCode, s.snippet(resp))
		},
		Observe: func(a retry.Attempt, resp *http.Response) {
			tries = a.N
			if a.Err == nil && (a.Status < 300 || !described) {
				return // a success, or an answer post reads itself below
			}
			described = false
			msg := ""
			if a.Err != nil {
				msg = a.Err.Error()
			} else {
				msg = a.Detail
			}
			log.Warn("run summary delivery attempt failed", "attempt", prior+a.N, "max_attempts", maxA,
				"error", msg, "will_retry", a.Retry)
		},
	}
	resp, err := policy.Do(req, "", func(r *http.Request) (*http.Response, error) {
		resp, err := client.Do(r)
		if err != nil {
			return nil, s.netError(err)
		}
		return resp, nil
	}, hooks)
	if err != nil {
		return max(tries, 1), err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return tries, nil
	}
	err = fmt.Errorf("slack answered %d %s", resp.StatusCode, s.snippet(resp))
	log.Warn("run summary delivery attempt failed", "attempt", prior+tries, "max_attempts", maxA,
		"error", err.Error(), "will_retry", false)
	return tries, err
}

// snippet is the start of an answer's body as one line of printable
// text, the webhook URL redacted; the rest of the body is drained.
func (s *Slack) snippet(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return s.redact(printable(string(b)))
}

// redactedError is a transport error with the request URL removed; it
// still unwraps to the cause for errors.Is (context.Canceled, timeouts).
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.cause }

// netError drops the *url.Error wrapper, whose text quotes the URL, and
// redacts the rest for good measure.
func (s *Slack) netError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &redactedError{msg: "post: " + s.redact(err.Error()), cause: err}
}

// redact removes the webhook URL, and its path and query on their own,
// from msg.
func (s *Slack) redact(msg string) string {
	secrets := []string{s.URL}
	if u, err := url.Parse(s.URL); err == nil {
		secrets = append(secrets, u.Path, u.EscapedPath(), u.RawQuery)
	}
	for _, sec := range secrets {
		if len(sec) > 1 {
			msg = strings.ReplaceAll(msg, sec, "[redacted]")
		}
	}
	return msg
}

// printable keeps a response body snippet to one line of printable text.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, s)
	return clip(strings.TrimSpace(s), 200)
}

// SentAt returns when the summary of run runID was posted to channel (""
// is DefaultChannel), and false when it was not, or when that cannot be
// read: it only words a message, so a read error is not worth one.
func SentAt(ctx context.Context, db *gorm.DB, runID int64, channel string) (time.Time, bool) {
	if channel == "" {
		channel = DefaultChannel
	}
	var row struct{ SentAt *time.Time }
	err := db.WithContext(ctx).Table("sent_notifications").Select("sent_at").
		Where("run_id = ? AND channel = ? AND status = ?", runID, channel, StatusSent).Scan(&row).Error
	if err != nil || row.SentAt == nil {
		return time.Time{}, false
	}
	return *row.SentAt, true
}
