// Command fakestripe serves the project's fake Stripe API with a generated
// account, and can seed a database as the account's webhooks would have
// left it with a fraction of them missed. It is a development and demo
// tool; tests use package stripefake directly.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
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
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:12111", "address to serve on (loopback)")
	payments := flag.Int("payments", 1000, "payments to generate")
	days := flag.Int("days", 3, "spread the payments over this many days before now")
	seed := flag.Int64("seed", 1, "generator seed")
	seedDB := flag.String("seed-db", "", "PostgreSQL URL to migrate and seed as the webhooks left it")
	missed := flag.Int("miss-every", 10, "when seeding, miss every Nth webhook delivery")
	ready := flag.String("ready-file", "", "write the base URL here once serving")
	allKinds := flag.Bool("all-kinds", false, "craft payments producing every drift kind (with -seed-db, seed their local rows too)")
	flag.Parse()

	now := time.Now().UTC()
	srv := stripefake.New(stripefake.Options{Seed: *seed})
	acct := srv.Account("")
	var sc *scenario.Stripe
	if *allKinds {
		sc = scenario.NewStripe(acct, now, scenario.Options{Payments: *payments, Seed: *seed, MissEvery: *missed})
	} else {
		acct.Generate(stripefake.GenOptions{Payments: *payments, Start: now.Add(-time.Duration(*days) * 24 * time.Hour), End: now.Add(-time.Minute), Seed: *seed})
	}

	if *seedDB != "" {
		db, err := gorm.Open(postgres.Open(*seedDB), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			log.Fatalf("connect: %v", err)
		}
		ctx := context.Background()
		if _, err := models.Migrate(ctx, db); err != nil {
			log.Fatalf("migrate: %v", err)
		}
		var delivered, miss int
		if sc != nil {
			if err := sc.SeedLocal(ctx, db, now); err != nil {
				log.Fatalf("seed: %v", err)
			}
			delivered, miss = len(sc.Deliveries), sc.Missed
		} else {
			var err error
			delivered, miss, err = webhooksim.Seed(ctx, db, "stripe", webhooksim.Stripe(acct.Deliveries()), now, func(i int, _ webhooksim.Delivery) bool {
				return *missed <= 0 || i%*missed != *missed/2
			})
			if err != nil {
				log.Fatalf("seed: %v", err)
			}
		}
		fmt.Fprintf(os.Stderr, "fakestripe: %d payments; seeded the database with %d webhook deliveries, %d missed\n", *payments, delivered, miss)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	url := "http://" + ln.Addr().String()
	if *ready != "" {
		if err := os.WriteFile(*ready, []byte(url), 0o644); err != nil {
			log.Fatalf("ready file: %v", err)
		}
	}
	fmt.Fprintf(os.Stderr, "fakestripe: serving %s\n", url)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		_ = hs.Close()
	}()
	if err := hs.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
