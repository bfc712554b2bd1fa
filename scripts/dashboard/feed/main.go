// Command feed is the provider side of scripts/dashboard-screenshot.sh: a
// fake Stripe (the platform and two connected accounts) and a fake
// GoCardless on loopback, whose payments happen in real time over the
// next -duration, with their webhooks delivered to a PostgreSQL database
// as they fall due, a share of them lost, while `reconciler serve`
// reconciles it on a short schedule and Prometheus scrapes serve. It is
// the demo's data made live, so that the dashboard's panels show real
// series of the real binary: nothing here writes a metric.
//
// The story, as shares of -duration: Stripe answers 3% of requests 429
// (a third of them from 45% to 60%: another integration shares the key);
// the platform's webhook endpoint loses 3% of deliveries, 15% from 30% to
// 70%; acct_1DashSouth's key is revoked (401) from 70% on, so its runs
// fail and its last success ages; every 20 seconds someone cancels a
// platform payment by hand that Stripe then captures, and every minute a
// GoCardless one, each a conflict the runs refuse. Every answer takes
// 1.5 s.
//
// It is a development tool like cmd/fakestripe, not part of the binary.
package main

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
)

// The connected accounts, as scripts/dashboard/config.yaml names them.
const (
	north = "acct_1DashNorth"
	south = "acct_1DashSouth"
)

// feed is one account's webhooks: every delivery the fake will make, and
// how many of them have fallen due.
type feed struct {
	source, account string
	deliveries      []webhooksim.Delivery
	next            int
	miss            func(share float64) float64 // the share of deliveries lost at a point of the story
}

// edit is a change made by hand to a local row, once its time has come.
type edit struct {
	at     time.Time
	source string
	id     string
	cols   map[string]any
}

func main() {
	dsn := flag.String("db", "", "PostgreSQL URL to migrate and feed")
	duration := flag.Duration("duration", 12*time.Minute, "how long the story lasts")
	envFile := flag.String("env-file", "", "write STRIPE_API_BASE= and GOCARDLESS_API_BASE= lines here once serving")
	perMinute := flag.Int("payments-per-minute", 60, "platform payments a minute (the other accounts get fewer)")
	flag.Parse()
	if *dsn == "" {
		log.Fatal("feed: -db is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	db, err := gorm.Open(postgres.Open(*dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatalf("feed: connect: %v", err)
	}
	if _, err := models.Migrate(ctx, db); err != nil {
		log.Fatalf("feed: migrate: %v", err)
	}

	start := time.Now().UTC().Truncate(time.Second)
	end := start.Add(*duration)
	share := func(t time.Time) float64 { return float64(t.Sub(start)) / float64(*duration) }
	between := func(s float64, lo, hi float64) bool { return s >= lo && s < hi }

	sf := stripefake.New(stripefake.Options{Seed: 19})
	stripeURL := sf.Start()
	defer sf.Close()
	gf := gcfake.New(gcfake.Options{Seed: 19})
	gcURL := gf.Start()
	defer gf.Close()

	// Every payment of the story, created over [start, end): histories that
	// would go past end stop there. The fakes list events only up to the
	// window each run asks for, so the future stays unseen.
	minutes := duration.Minutes()
	gen := func(a *stripefake.Account, perMin float64, seed int64) {
		a.Generate(stripefake.GenOptions{Payments: int(perMin * minutes), Start: start, End: end, Seed: seed})
	}
	gen(sf.Account(""), float64(*perMinute), 1)
	gen(sf.Account(north), float64(*perMinute)/3, 2)
	gen(sf.Account(south), float64(*perMinute)/4, 3)
	gf.Generate(gcfake.GenOptions{Payments: int(float64(*perMinute) / 3 * minutes), Start: start, End: end, Seed: 4})

	// The conflicts: created and (a few seconds later) canceled by hand
	// locally, then captured (Stripe) or submitted and confirmed
	// (GoCardless) at the provider, which the guard cannot apply over a
	// canceled row.
	var edits []edit
	for t := start.Add(15 * time.Second); t.Before(end.Add(-time.Minute)); t = t.Add(20 * time.Second) {
		pi := sf.Account("").CreatePayment(4200+int64(t.Sub(start).Seconds()), "gbp", false, t)
		sf.Account("").Capture(pi, t.Add(40*time.Second))
		edits = append(edits, edit{at: t.Add(10 * time.Second), source: "stripe", id: pi,
			cols: map[string]any{"state": string(models.StateCanceled), "source_updated_at": t.Add(10 * time.Second)}})
	}
	for t := start.Add(30 * time.Second); t.Before(end.Add(-time.Minute)); t = t.Add(time.Minute) {
		pm := gf.CreatePayment(1500+int64(t.Sub(start).Seconds()), "GBP", t)
		gf.Submit(pm, t.Add(30*time.Second))
		gf.Confirm(pm, t.Add(50*time.Second))
		edits = append(edits, edit{at: t.Add(10 * time.Second), source: "gocardless", id: pm,
			cols: map[string]any{"state": string(models.StateCanceled), "source_updated_at": t.Add(10 * time.Second)}})
	}

	steady := func(p float64) func(float64) float64 { return func(float64) float64 { return p } }
	feeds := []*feed{
		{source: "stripe", account: "", deliveries: webhooksim.Stripe(sf.Account("").Deliveries()), miss: func(s float64) float64 {
			if between(s, 0.3, 0.7) {
				return 0.15 // the webhook endpoint degraded
			}
			return 0.03
		}},
		{source: "stripe", account: north, deliveries: webhooksim.Stripe(sf.Account(north).Deliveries()), miss: steady(0.01)},
		{source: "stripe", account: south, deliveries: webhooksim.Stripe(sf.Account(south).Deliveries()), miss: steady(0.005)},
		{source: "gocardless", account: "", deliveries: webhooksim.GoCardless(gf.Deliveries()), miss: steady(0.04)},
	}

	if *envFile != "" {
		env := fmt.Sprintf("STRIPE_API_BASE=%s\nGOCARDLESS_API_BASE=%s\n", stripeURL, gcURL)
		if err := os.WriteFile(*envFile, []byte(env), 0o644); err != nil {
			log.Fatalf("feed: %v", err)
		}
	}
	log.Printf("feed: stripe %s, gocardless %s, until %s", stripeURL, gcURL, end.Format(time.TimeOnly))

	gf.SetFailureRate(503, 0.02)
	// Answers take a while, as a slow API's do, so that a run lasts a few
	// seconds and a 5 s scrape sees it in progress.
	sf.SetLatency(1500 * time.Millisecond)
	gf.SetLatency(1500 * time.Millisecond)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	revoked := false
	for {
		now := time.Now().UTC()
		s := share(now)
		if between(s, 0.45, 0.6) {
			sf.SetFailureRate(429, 0.35) // another integration shares the key
		} else {
			sf.SetFailureRate(429, 0.03)
		}
		if r := s >= 0.7; r != revoked {
			revoked = r
			if r {
				sf.FailAccount(south, 401)
				log.Printf("feed: %s's key revoked", south)
			} else {
				sf.FailAccount(south, 0)
				log.Printf("feed: %s's key restored", south)
			}
		}
		for _, f := range feeds {
			if err := f.deliver(ctx, db, now, s); err != nil {
				log.Printf("feed: %s %q: %v", f.source, f.account, err)
			}
		}
		for len(edits) > 0 && !edits[0].at.After(now) {
			e := edits[0]
			edits = edits[1:]
			res := db.WithContext(ctx).Model(&models.Payment{}).Where("provider = ? AND provider_id = ?", e.source, e.id).Updates(e.cols)
			if res.Error != nil {
				log.Printf("feed: edit %s: %v", e.id, res.Error)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// deliver applies f's deliveries due by now, but the share lost at s: a
// delivery is lost when its event id's hash falls under that share.
func (f *feed) deliver(ctx context.Context, db *gorm.DB, now time.Time, s float64) error {
	var due []webhooksim.Delivery
	for ; f.next < len(f.deliveries) && !f.deliveries[f.next].At.After(now); f.next++ {
		d := f.deliveries[f.next]
		h := fnv.New32a()
		h.Write([]byte(d.EventID))
		if float64(h.Sum32()%10000)/10000 < f.miss(s) {
			continue
		}
		due = append(due, d)
	}
	if len(due) == 0 {
		return nil
	}
	if f.source == "stripe" {
		return scenario.SeedStripeAccount(ctx, db, f.account, due, now)
	}
	_, _, err := webhooksim.Seed(ctx, db, f.source, due, now, func(int, webhooksim.Delivery) bool { return true })
	return err
}
