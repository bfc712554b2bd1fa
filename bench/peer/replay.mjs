// The peer of BenchmarkPeer (bench/peer_test.go): replays a JSON-lines file
// of Stripe events through @supabase/stripe-sync-engine's webhook path,
// StripeSync.processEvent, in file order, one event at a time (or
// --concurrency N in flight), into a fresh database, and prints what it did
// as one JSON object on stdout.
//
//   node replay.mjs --modules DIR --database-url URL --events FILE [--stripe-base URL] [--concurrency N]
//
// --modules is the directory holding node_modules (the benchmark installs
// bench/peer/package.json there, outside the repository). The engine is
// loaded from there with require: its CommonJS build, the same code as its
// ES module build.
//
// What the timer covers: the processEvent calls only. Migrations, reading
// and parsing the file, and Node's start are outside it (reported apart),
// which favours the peer: reconciler's figure includes fetching and
// decoding the events over HTTP.
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { performance } from 'node:perf_hooks'

const { values: args } = parseArgs({
  options: {
    modules: { type: 'string' },
    'database-url': { type: 'string' },
    events: { type: 'string' },
    'stripe-base': { type: 'string' },
    concurrency: { type: 'string', default: '1' },
  },
})
for (const k of ['modules', 'database-url', 'events']) {
  if (!args[k]) {
    console.error(`replay.mjs: --${k} is required`)
    process.exit(2)
  }
}
const concurrency = Number.parseInt(args.concurrency, 10)
if (!(concurrency >= 1)) {
  console.error('replay.mjs: --concurrency must be a positive integer')
  process.exit(2)
}

const require = createRequire(join(args.modules, 'package.json'))
const { StripeSync, runMigrations } = require('@supabase/stripe-sync-engine')
const Stripe = require('stripe')
// Their package.json files are not exported: read them from disk.
const versionOf = (pkg) =>
  JSON.parse(readFileSync(join(args.modules, 'node_modules', pkg, 'package.json'), 'utf8')).version
const version = versionOf('@supabase/stripe-sync-engine')
const stripeVersion = versionOf('stripe')

// runMigrations logs its errors and returns normally: keep them and fail.
const errors = []
const logger = {
  info() {},
  warn() {},
  debug() {},
  trace() {},
  error(err, msg) {
    errors.push(`${msg ?? ''} ${err?.stack ?? err}`)
  },
}
logger.child = () => logger

const databaseUrl = args['database-url']
let t = performance.now()
await runMigrations({ databaseUrl, schema: 'stripe', logger })
const migrateSeconds = (performance.now() - t) / 1000
if (errors.length > 0) {
  console.error('replay.mjs: migrations failed:\n' + errors.join('\n'))
  process.exit(1)
}

const stripeSecretKey = 'sk_test_bench'
const sync = new StripeSync({
  poolConfig: { connectionString: databaseUrl, max: 10 },
  schema: 'stripe',
  stripeSecretKey,
  stripeWebhookSecret: 'whsec_unused', // processEvent takes a verified event: no signature
  // The defaults, spelled out: trust the webhook payload (no re-fetch per
  // event), no backfill of related objects, no expansion of lists.
  revalidateObjectsViaStripeApi: [],
  backfillRelatedEntities: false,
  autoExpandLists: false,
})
if (args['stripe-base']) {
  // Should the engine call the API at all, it calls the benchmark's fake,
  // which counts the requests. StripeSync builds its client without a host
  // option, so the client is replaced by one that has it.
  const u = new URL(args['stripe-base'])
  sync.stripe = new Stripe(stripeSecretKey, {
    host: u.hostname,
    port: Number(u.port),
    protocol: u.protocol.replace(':', ''),
    appInfo: { name: 'Stripe Postgres Sync' },
  })
}

const { rows: tables } = await sync.postgresClient.query(
  `SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = 'stripe'`,
)
if (tables[0].n === 0) {
  console.error('replay.mjs: the migrations created no table in schema stripe')
  process.exit(1)
}

t = performance.now()
const events = readFileSync(args.events, 'utf8')
  .split('\n')
  .filter((line) => line !== '')
  .map((line) => JSON.parse(line))
const readSeconds = (performance.now() - t) / 1000

// processEvent throws this for a type it has no case for (payout.* in
// 0.48.5): a webhook endpoint would answer it with an error. Counted, not
// fatal; any other error is.
const unhandledMessage = 'Unhandled webhook event'
const handled = {}
const unhandled = {}
const one = async (ev) => {
  try {
    await sync.processEvent(ev)
    handled[ev.type] = (handled[ev.type] ?? 0) + 1
  } catch (err) {
    if (err?.message !== unhandledMessage) {
      throw new Error(`event ${ev.id} (${ev.type}): ${err?.stack ?? err}`)
    }
    unhandled[ev.type] = (unhandled[ev.type] ?? 0) + 1
  }
}

t = performance.now()
if (concurrency === 1) {
  for (const ev of events) {
    await one(ev)
  }
} else {
  // N workers take the next event in file order: at most N in flight.
  let next = 0
  const worker = async () => {
    while (next < events.length) {
      await one(events[next++])
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
}
const replaySeconds = (performance.now() - t) / 1000

const rows = {}
for (const table of ['payment_intents', 'charges', 'refunds', 'disputes']) {
  const { rows: r } = await sync.postgresClient.query(`SELECT count(*)::int AS n FROM stripe.${table}`)
  rows[table] = r[0].n
}
await sync.close()

const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0)
console.log(
  JSON.stringify({
    version,
    stripe_node: stripeVersion,
    node: process.version,
    concurrency,
    events: events.length,
    handled: sum(handled),
    unhandled: sum(unhandled),
    handled_by_type: handled,
    unhandled_by_type: unhandled,
    migrate_s: migrateSeconds,
    read_s: readSeconds,
    replay_s: replaySeconds,
    rows,
  }),
)
