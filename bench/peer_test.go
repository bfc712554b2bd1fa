package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/report"
)

// peerVersion is the version of @supabase/stripe-sync-engine that
// bench/peer/package.json pins (issue 16).
const peerVersion = "0.48.5"

// BenchmarkPeer is issue 16's comparison with @supabase/stripe-sync-engine,
// measured side by side in one run: one fake Stripe account of
// $BENCH_PEER_PAYMENTS payments (default 20,000) created over 29 days, all
// inside Stripe's 30-day event retention; reconciler runs over it (`run
// --since now-29.5d`, pacing lifted, empty schema) and the peer replays the
// same events, the types reconciler reads (stripe.EventTypes) in the same
// window, oldest first, through its webhook path (StripeSync.processEvent,
// bench/peer/replay.mjs) into a fresh database. The two alternate for
// $BENCH_PEER_ROUNDS rounds (default 2: ours, peer, ours, peer), each on
// fresh tables. It reports the medians (reconciler_s, peer_s), their ratio
// (speedup: peer over ours) and the events. Each round's figures are
// logged.
//
// reconciler's time is the binary's wall time, fetching the events over
// HTTP included; the peer's is its processEvent calls only (migrations,
// reading the file and Node's start excluded), which favours the peer.
// $BENCH_PEER_CONCURRENCY (default 1) keeps that many processEvent calls in
// flight instead of one. $BENCH_PEER_STRIPE_SIZED=1 renders the payment
// intents and charges as large as Stripe's (stripefake.Options.FullObjects).
//
// The peer is installed once with npm into $BENCH_PEER_DIR (default
// <user cache dir>/reconciler-peer/0.48.5), never into the repository; the
// benchmark skips when node, npm or the registry is unavailable.
func BenchmarkPeer(b *testing.B) {
	b.StopTimer()
	payments := peerEnvInt(b, "BENCH_PEER_PAYMENTS", 20_000)
	rounds := peerEnvInt(b, "BENCH_PEER_ROUNDS", 2)
	concurrency := peerEnvInt(b, "BENCH_PEER_CONCURRENCY", 1)
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		b.Skip("DATABASE_URL is unset; run the benchmark through scripts/test.sh")
	}
	modules := installPeer(b)
	script, err := filepath.Abs(filepath.Join("peer", "replay.mjs"))
	if err != nil {
		b.Fatal(err)
	}

	now := time.Now().UTC()
	since := now.Add(-708 * time.Hour) // 29.5 days: the whole window is in the event log
	fake := stripefake.New(stripefake.Options{Seed: 1, FullObjects: os.Getenv("BENCH_PEER_STRIPE_SIZED") == "1"})
	fakeURL := fake.Start()
	b.Cleanup(fake.Close)
	acct := fake.Account("")
	acct.CreatePayment(100, "gbp", false, now.Add(-714*time.Hour)) // before the window, inside retention: the anchor
	acct.Generate(stripefake.GenOptions{Payments: payments, Start: now.Add(-696 * time.Hour), End: now.Add(-time.Minute), Seed: 7})
	eventsFile, events := peerExportEvents(b, acct, since)
	b.Logf("peer: %d payments, %d events of the %d types reconciler reads since %s; @supabase/stripe-sync-engine %s in %s, concurrency %d",
		payments, events, len(stripe.EventTypes), since.Format(time.RFC3339), peerVersion, modules, concurrency)

	admin, err := pgx.Connect(context.Background(), base)
	if err != nil {
		b.Fatalf("connect: %v", err)
	}
	b.Cleanup(func() { _ = admin.Close(context.Background()) })

	var ours, peers []float64
	for range b.N {
		for round := 1; round <= rounds; round++ {
			peerCheckpoint(b, admin)
			o := peerRunOurs(b, fakeURL, now, since)
			if o.run.EventsRead != int64(events) {
				b.Logf("round %d: reconciler read %d events, the file holds %d", round, o.run.EventsRead, events)
			}

			peerCheckpoint(b, admin)
			before := fake.Requests()
			p := runPeer(b, admin, base, modules, script, eventsFile, fakeURL, concurrency, round)
			peerRequests := fake.Requests() - before
			if p.Events != events {
				b.Fatalf("round %d: the peer read %d events, the file holds %d", round, p.Events, events)
			}
			ours, peers = append(ours, o.wall.Seconds()), append(peers, p.ReplaySeconds)
			b.Logf("round %d: reconciler %.2f s (%d events read, %d requests, %d payments examined); "+
				"stripe-sync-engine %.2f s (%d events: %d handled, %d unhandled %v; %d requests to the fake; node process %.2f s wall, %.2f s CPU; migrations %.2f s; rows %v); ratio %.2f",
				round, o.wall.Seconds(), o.run.EventsRead, o.run.APIRequests, o.run.Examined,
				p.ReplaySeconds, p.Events, p.Handled, p.Unhandled, p.UnhandledByType, peerRequests, p.wall.Seconds(), p.cpu.Seconds(), p.MigrateSeconds, p.Rows,
				p.ReplaySeconds/o.wall.Seconds())
		}
	}
	mo, mp := peerMedian(ours), peerMedian(peers)
	b.Logf("peer: median reconciler %.2f s, stripe-sync-engine %.2f s: reconciler %.2f times faster", mo, mp, mp/mo)
	b.ReportMetric(mo, "reconciler_s")
	b.ReportMetric(mp, "peer_s")
	b.ReportMetric(mp/mo, "speedup")
	b.ReportMetric(float64(events), "events")
}

// peerRunOurs reconciles the fake account into an empty schema, as runOnce
// does, and drops the schema afterwards so that every round and the peer
// start from the same database size.
func peerRunOurs(b *testing.B, fakeURL string, now, since time.Time) result {
	b.Helper()
	w := world{db: pgtest.New(b), url: fakeURL, now: now}
	so, _, wall := w.exec(b, 1000, "run", "--since", since.Format(time.RFC3339), "--format", "json")
	var rep report.Report
	if err := json.Unmarshal(so, &rep); err != nil {
		b.Fatalf("run: %v\n%s", err, so)
	}
	run := rep.Runs[0]
	if run.Notes["listing"] != nil {
		b.Fatalf("run listed objects (%v): the window must lie inside the event log", run.Notes["listing"])
	}
	if err := w.db.Exec(`DROP SCHEMA ` + w.db.Schema + ` CASCADE`).Error; err != nil {
		b.Fatalf("drop schema: %v", err)
	}
	return result{wall: wall, run: run}
}

// peerResult is what replay.mjs prints.
type peerResult struct {
	Version         string         `json:"version"`
	Events          int            `json:"events"`
	Handled         int            `json:"handled"`
	Unhandled       int            `json:"unhandled"`
	UnhandledByType map[string]int `json:"unhandled_by_type"`
	MigrateSeconds  float64        `json:"migrate_s"`
	ReplaySeconds   float64        `json:"replay_s"`
	Rows            map[string]int `json:"rows"`
	wall, cpu       time.Duration  // the node process's wall and CPU time
}

// runPeer replays the events file through the peer into a database of its
// own (its migrations name the schema stripe), dropped afterwards.
func runPeer(b *testing.B, admin *pgx.Conn, base, modules, script, eventsFile, fakeURL string, concurrency, round int) peerResult {
	b.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("reconciler_peer_%d_%d", os.Getpid(), round)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		b.Fatalf("create database: %v", err)
	}
	defer func() {
		if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			b.Errorf("drop database %s: %v", name, err)
		}
	}()
	u, err := url.Parse(base)
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	cmd := exec.Command("node", script, "--modules", modules, "--database-url", u.String(),
		"--events", eventsFile, "--stripe-base", fakeURL, "--concurrency", strconv.Itoa(concurrency))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "NODE_ENV=production"}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	b.StartTimer()
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatalf("peer: %v\n%s", err, se.String())
	}
	var p peerResult
	if err := json.Unmarshal(so.Bytes(), &p); err != nil {
		b.Fatalf("peer output: %v\n%s\n%s", err, so.String(), se.String())
	}
	if p.Version != peerVersion {
		b.Fatalf("peer: @supabase/stripe-sync-engine %s installed, want %s", p.Version, peerVersion)
	}
	p.wall, p.cpu = wall, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime()
	return p
}

// peerExportEvents writes, oldest first and one JSON object a line, the events
// reconciler reads in [since, now): the types of stripe.EventTypes, as the
// fake renders them on /v1/events.
func peerExportEvents(b *testing.B, acct *stripefake.Account, since time.Time) (string, int) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "events.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	n := 0
	var line bytes.Buffer
	for _, d := range acct.Deliveries() {
		if d.At.Before(since) || !slices.Contains(stripe.EventTypes, d.EventType) {
			continue
		}
		line.Reset()
		if err := json.Compact(&line, d.Payload); err != nil {
			b.Fatalf("event %s: %v", d.EventID, err)
		}
		line.WriteByte('\n')
		if _, err := w.Write(line.Bytes()); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return path, n
}

// installPeer installs bench/peer/package.json and its lock with `npm ci`
// into the cache directory, unless the same files are installed there
// already, and returns the directory. It skips b when node or npm is
// missing or the install fails (no registry): never a failure.
func installPeer(b *testing.B) string {
	b.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s is not installed: the comparison with @supabase/stripe-sync-engine needs Node.js and npm", tool)
		}
	}
	dir := os.Getenv("BENCH_PEER_DIR")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			b.Skipf("no cache directory for the peer (%v); set BENCH_PEER_DIR", err)
		}
		dir = filepath.Join(cache, "reconciler-peer", peerVersion)
	}
	var manifest []byte
	files := map[string][]byte{}
	for _, name := range []string{"package.json", "package-lock.json"} {
		body, err := os.ReadFile(filepath.Join("peer", name))
		if err != nil {
			b.Fatal(err)
		}
		files[name] = body
		manifest = append(manifest, body...)
	}
	sum := sha256.Sum256(manifest)
	stamp := hex.EncodeToString(sum[:])
	stampFile := filepath.Join(dir, ".installed")
	installed := filepath.Join(dir, "node_modules", "@supabase", "stripe-sync-engine", "package.json")
	if have, err := os.ReadFile(stampFile); err == nil && strings.TrimSpace(string(have)) == stamp {
		if _, err := os.Stat(installed); err == nil {
			return dir
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Skipf("peer directory %s: %v", dir, err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Skipf("npm could not install @supabase/stripe-sync-engine@%s into %s (%v): is the registry reachable?\n%s", peerVersion, dir, err, out)
	}
	if err := os.WriteFile(stampFile, []byte(stamp+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// peerCheckpoint flushes the dirty pages of the previous round, so that no
// round pays for another's checkpoint. A server that refuses (not a
// superuser) is left as it is.
func peerCheckpoint(b *testing.B, admin *pgx.Conn) {
	b.Helper()
	if _, err := admin.Exec(context.Background(), `CHECKPOINT`); err != nil {
		b.Logf("checkpoint: %v (rounds may pay for each other's writes)", err)
	}
}

func peerEnvInt(b *testing.B, key string, def int) int {
	b.Helper()
	s := os.Getenv(key)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", key, s)
	}
	return n
}

func peerMedian(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
