// Renders a Grafana dashboard JSON against a real Prometheus as a static
// page, for scripts/dashboard-screenshot.sh: Grafana itself is not
// installable here, so this is a small, faithful stand-in for what the
// screenshot needs, and no more.
//
// It does what Grafana does with the dashboard opened with every variable
// at All: the ${datasource} is the Prometheus given; $provider and $account
// become their allValue; $__interval is the time range over the panel's
// width in pixels (maxDataPoints), rounded as Grafana rounds it and never
// below the panel's interval or the scrape interval; $__rate_interval is
// max($__interval + scrape interval, 4 × scrape interval); $__range the
// range. Range queries go to /api/v1/query_range with that step, instant
// ones to /api/v1/query at the end. Each panel is drawn at its gridPos (24
// columns, rows of 30 px with 8 px gaps, as Grafana's grid) in Grafana's
// dark theme: time series with uPlot (the library Grafana draws them
// with), stat, bar gauge and table panels as HTML. Thresholds, units,
// decimals, fixed-colour overrides (byName, byRegexp), stacking, bars and
// threshold lines are honoured; anything else of Grafana is not.
//
// node render.mjs --dashboard FILE --prometheus URL --from UNIX --to UNIX
//   --scrape-interval 5s --uplot DIR --out PAGE.html --size-file FILE
// It exits 3 when a panel has no data (unless --allow-empty).

import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) {
  const k = process.argv[i].replace(/^--/, "");
  if (k === "allow-empty") { args[k] = true; i--; continue; }
  args[k] = process.argv[i + 1];
}
for (const k of ["dashboard", "prometheus", "from", "to", "uplot", "out"]) {
  if (!args[k]) { console.error(`render.mjs: --${k} is required`); process.exit(2); }
}
const dash = JSON.parse(readFileSync(args.dashboard, "utf8"));
const from = Number(args.from), to = Number(args.to);
const scrape = seconds(args["scrape-interval"] || "15s");
const WIDTH = Number(args.width || 1600);
const PAD = 16, HEADER = 96, CELL = 30, GAP = 8;

function seconds(d) {
  const m = /^([0-9.]+)(ms|s|m|h|d)$/.exec(d);
  if (!m) throw new Error(`not a duration: ${d}`);
  return Number(m[1]) * { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 }[m[2]];
}

// Grafana's rangeutil.roundInterval (milliseconds).
function roundInterval(ms) {
  const table = [[15, 10], [35, 20], [75, 50], [150, 100], [350, 200], [750, 500], [1500, 1000], [3500, 2000],
    [7500, 5000], [12500, 10000], [17500, 15000], [25000, 20000], [45000, 30000], [90000, 60000], [210000, 120000],
    [450000, 300000], [750000, 600000], [1050000, 900000], [1500000, 1200000], [2700000, 1800000],
    [5400000, 3600000], [9000000, 7200000], [16200000, 10800000], [32400000, 21600000], [86400000, 43200000]];
  for (const [below, to] of table) if (ms < below) return to;
  return 86400000;
}

function fmtDur(s) { return s >= 60 && s % 60 === 0 ? `${s / 60}m` : `${Math.round(s)}s`; }

async function prom(path, params) {
  const u = new URL(path, args.prometheus);
  for (const [k, v] of Object.entries(params)) u.searchParams.append(k, v);
  const res = await fetch(u);
  const body = await res.json();
  if (body.status !== "success") throw new Error(`${u}: ${body.error || res.status}`);
  return body.data;
}

// The variables, as Grafana lists them for the time range.
const vars = {};
for (const v of dash.templating.list) {
  if (v.type === "datasource") { vars[v.name] = { shown: "Prometheus", value: args.prometheus }; continue; }
  const q = typeof v.query === "string" ? v.query : v.query.query;
  const m = /^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$/.exec(q);
  let values = [];
  if (m) {
    const sel = m[1].replace(/\$\{?([a-z_]+)\}?/g, (_, n) => (vars[n] ? vars[n].value : ".*"));
    values = await prom(`/api/v1/label/${m[2]}/values`, { "match[]": sel, start: from, end: to });
  }
  vars[v.name] = { shown: `All (${values.join(", ") || "none"})`, value: v.allValue || values.join("|") };
}

function substitute(expr, intervalS, minIntervalS) {
  const rate = Math.max(intervalS + scrape, 4 * scrape);
  return expr
    .replaceAll("$__rate_interval", fmtDur(rate))
    .replaceAll("$__interval", fmtDur(Math.max(intervalS, minIntervalS)))
    .replaceAll("$__range", fmtDur(to - from))
    .replace(/\$\{?([a-z_]+)\}?/g, (all, n) => (vars[n] ? vars[n].value : all));
}

function legend(fmt, metric, expr) {
  if (!fmt || fmt === "__auto") {
    const ls = Object.entries(metric).filter(([k]) => k !== "__name__").map(([k, v]) => `${k}="${v}"`);
    return ls.length ? `{${ls.join(", ")}}` : expr;
  }
  return fmt.replace(/\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}/g, (_, l) => metric[l] ?? "");
}

const colW = (WIDTH - 2 * PAD + GAP) / 24;
const layout = (g) => ({
  left: PAD + g.x * colW, top: HEADER + g.y * (CELL + GAP),
  width: g.w * colW - GAP, height: g.h * CELL + (g.h - 1) * GAP,
});

const empty = [];
const panels = [];
for (const p of dash.panels) {
  const box = layout(p.gridPos);
  const interval = Math.max(roundInterval(((to - from) * 1000) / Math.max(100, box.width)) / 1000, scrape);
  const minInterval = p.interval ? seconds(p.interval) : scrape;
  const step = Math.max(interval, minInterval);
  const start = Math.floor(from / step) * step, end = Math.floor(to / step) * step;
  const out = { ...p, box, step, series: [], queries: [] };
  for (const t of p.targets) {
    const expr = substitute(t.expr, interval, minInterval);
    out.queries.push(expr);
    if (t.instant) {
      const d = await prom("/api/v1/query", { query: expr, time: to });
      for (const r of d.result) {
        out.series.push({ name: legend(t.legendFormat, r.metric, expr), metric: r.metric, refId: t.refId, values: [[to, Number(r.value[1])]] });
      }
    } else {
      const d = await prom("/api/v1/query_range", { query: expr, start, end, step });
      for (const r of d.result) {
        out.series.push({ name: legend(t.legendFormat, r.metric, expr), metric: r.metric, refId: t.refId, values: r.values.map(([ts, v]) => [ts, Number(v)]) });
      }
    }
  }
  out.grid = [];
  for (let ts = start; ts <= end; ts += step) out.grid.push(ts);
  if (out.series.length === 0 || out.series.every((s) => s.values.every(([, v]) => Number.isNaN(v)))) empty.push(p.title);
  panels.push(out);
  console.error(`panel ${p.id} ${p.title}: ${out.series.length} series, step ${step}s`);
}

const bottom = Math.max(...panels.map((p) => p.box.top + p.box.height)) + PAD;
const meta = {
  title: dash.title, from, to, scrape, vars: Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, v.shown])),
  labels: Object.fromEntries(dash.templating.list.map((v) => [v.name, v.label || v.name])),
};
const uplotDir = args.uplot;
const page = `<!doctype html>
<html><head><meta charset="utf-8"><title>${dash.title}</title>
<link rel="stylesheet" href="${pathToFileURL(join(uplotDir, "uPlot.min.css"))}">
<script src="${pathToFileURL(join(uplotDir, "uPlot.iife.min.js"))}"></script>
<style>
  html, body { margin: 0; background: #111217; color: #ccccdc; font: 13px Inter, "Helvetica Neue", Arial, sans-serif; }
  #root { position: relative; width: ${WIDTH}px; height: ${bottom}px; }
  .top { position: absolute; left: ${PAD}px; right: ${PAD}px; top: 10px; height: 76px; }
  .crumb { font-size: 18px; color: #d8d9da; } .crumb b { color: #fff; font-weight: 500; }
  .range { position: absolute; right: 0; top: 0; border: 1px solid #ffffff26; border-radius: 2px; padding: 5px 10px; background: #181b1f; }
  .vars { margin-top: 16px; display: flex; gap: 10px; }
  .var { display: flex; border: 1px solid #ffffff26; border-radius: 2px; }
  .var span { padding: 5px 8px; } .var .k { background: #22252b; color: #6e9fff; border-right: 1px solid #ffffff26; }
  .note { position: absolute; right: 0; top: 44px; color: #8e8e8e; font-size: 11px; }
  .panel { position: absolute; background: #181b1f; border: 1px solid #ffffff1f; border-radius: 2px; box-sizing: border-box; overflow: hidden; }
  .ptitle { height: 32px; line-height: 32px; padding: 0 8px; font-weight: 500; color: #ccccdc; white-space: nowrap; overflow: hidden; }
  .pbody { position: absolute; left: 8px; right: 8px; top: 32px; bottom: 8px; }
  .stats { display: flex; gap: 6px; height: 100%; }
  .stat { flex: 1; border-radius: 2px; display: flex; flex-direction: column; justify-content: center; padding: 0 10px; color: #fff; min-width: 0; }
  .stat .n { font-size: 13px; opacity: .9; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  .stat .v { font-size: 30px; font-weight: 500; white-space: nowrap; }
  .stats.rows { flex-direction: column; gap: 4px; }
  .stats.rows .stat { flex-direction: row; align-items: center; justify-content: space-between; }
  .stats.rows .stat .n { font-size: 15px; } .stats.rows .stat .v { font-size: 22px; }
  .legend { position: absolute; left: 0; right: 0; bottom: 0; display: flex; flex-wrap: wrap; gap: 2px 14px; font-size: 12px; overflow: hidden; }
  .legend i { display: inline-block; width: 14px; height: 4px; border-radius: 2px; margin-right: 6px; vertical-align: middle; }
  .bg { display: flex; flex-direction: column; gap: 6px; height: 100%; justify-content: center; }
  .bgrow { display: flex; align-items: center; gap: 8px; height: 20px; }
  .bgrow .n { width: 190px; text-align: right; white-space: nowrap; }
  .bgrow .track { flex: 1; height: 18px; background: #ffffff0d; position: relative; border-radius: 2px; }
  .bgrow .fill { position: absolute; left: 0; top: 0; bottom: 0; border-radius: 2px; }
  .bgrow .v { width: 44px; font-size: 16px; font-weight: 500; }
  table { border-collapse: collapse; width: 100%; font-size: 12px; }
  th { text-align: left; color: #6e9fff; font-weight: 500; border-bottom: 1px solid #ffffff26; padding: 5px 6px; }
  td { padding: 5px 6px; border-bottom: 1px solid #ffffff12; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; max-width: 120px; }
  .uplot, .u-wrap { font-family: inherit; } .u-legend { display: none; }
</style></head>
<body><div id="root"></div>
<script>
const META = ${JSON.stringify(meta)};
const PANELS = ${JSON.stringify(panels)};
${browser.toString()}
browser();
</script></body></html>
`;
writeFileSync(args.out, page);
if (args["size-file"]) writeFileSync(args["size-file"], `${WIDTH} ${Math.ceil(bottom)}\n`);
if (empty.length) {
  console.error(`render.mjs: no data in ${empty.map((t) => `"${t}"`).join(", ")}`);
  if (!args["allow-empty"]) process.exit(3);
}

// browser runs in the page: it draws META and PANELS.
function browser() {
  const named = { green: "#73BF69", red: "#F2495C", orange: "#FF9830", blue: "#5794F2", yellow: "#FADE2A", purple: "#B877D9",
    "dark-green": "#37872D", "dark-red": "#C4162A", transparent: "transparent" };
  const classic = ["#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9", "#705DA0", "#508642", "#CCA300", "#447EBC", "#C15C17"];
  const color = (c) => named[c] || c;
  const root = document.getElementById("root");
  const el = (tag, cls, parent, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  };
  const utc = (t) => new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19);

  const top = el("div", "top", root);
  const crumb = el("div", "crumb", top);
  crumb.innerHTML = "Dashboards / <b></b>";
  crumb.querySelector("b").textContent = META.title;
  el("div", "range", top, `${utc(META.from)} to ${utc(META.to)} UTC`);
  el("div", "note", top, "rendered by scripts/dashboard/render.mjs from deploy/grafana/reconciler.json and a real Prometheus; not Grafana");
  const vars = el("div", "vars", top);
  for (const [k, v] of Object.entries(META.vars)) {
    const d = el("div", "var", vars);
    el("span", "k", d, META.labels[k]);
    el("span", "", d, v);
  }

  function fmt(v, unit, decimals) {
    if (v === null || v === undefined || Number.isNaN(v)) return "No data";
    const d = (x, n) => (n === undefined || n === null ? String(Number(x.toPrecision(3))) : x.toFixed(n));
    switch (unit) {
      case "percentunit": return `${d(v * 100, decimals)}%`;
      case "reqps": return `${d(v, decimals)} req/s`;
      case "s": {
        const a = Math.abs(v);
        if (a < 1) return `${d(v * 1000, 0)} ms`;
        if (a < 60) return `${d(v, decimals)} s`;
        if (a < 3600) return `${d(v / 60, decimals ?? 1)} min`;
        if (a < 86400) return `${d(v / 3600, decimals ?? 1)} hour`;
        return `${d(v / 86400, decimals ?? 1)} day`;
      }
      default: return d(v, decimals);
    }
  }
  function thresholdColor(th, v) {
    let c = th.steps[0].color;
    for (const s of th.steps) if (s.value === null || v >= s.value) c = s.color;
    return color(c);
  }
  function matches(o, name) {
    if (o.matcher.id === "byName") return o.matcher.options === name;
    if (o.matcher.id === "byRegexp") return new RegExp(o.matcher.options).test(name);
    return false;
  }
  function prop(p, name, id, fallback) {
    let v = fallback;
    for (const o of p.fieldConfig.overrides || []) {
      if (!matches(o, name)) continue;
      for (const pr of o.properties) if (pr.id === id) v = pr.value;
    }
    return v;
  }
  const last = (s) => {
    for (let i = s.values.length - 1; i >= 0; i--) if (!Number.isNaN(s.values[i][1])) return s.values[i][1];
    return NaN;
  };

  for (const p of PANELS) {
    const box = el("div", "panel", root);
    Object.assign(box.style, { left: `${p.box.left}px`, top: `${p.box.top}px`, width: `${p.box.width}px`, height: `${p.box.height}px` });
    el("div", "ptitle", box, p.title);
    const body = el("div", "pbody", box);
    const def = p.fieldConfig.defaults;
    if (p.series.length === 0) { el("div", "", body, "No data"); continue; }

    if (p.type === "stat") {
      const wrap = el("div", "stats", body);
      if (p.options.orientation === "horizontal") wrap.classList.add("rows");
      for (const s of p.series) {
        const v = last(s);
        const c = thresholdColor(prop(p, s.name, "thresholds", def.thresholds), v);
        const st = el("div", "stat", wrap);
        st.style.background = p.options.colorMode === "background" ? c : "transparent";
        if (p.options.textMode !== "value") el("div", "n", st, s.name);
        el("div", "v", st, fmt(v, def.unit, def.decimals));
      }
    } else if (p.type === "bargauge") {
      const wrap = el("div", "bg", body);
      const vals = p.series.map(last);
      const max = Math.max(def.max ?? 0, ...vals, 1);
      p.series.forEach((s, i) => {
        const c = thresholdColor(prop(p, s.name, "thresholds", def.thresholds), vals[i]);
        const row = el("div", "bgrow", wrap);
        el("div", "n", row, s.name);
        const track = el("div", "track", row);
        const fill = el("div", "fill", track);
        Object.assign(fill.style, { width: `${(100 * vals[i]) / max}%`, background: c });
        const v = el("div", "v", row, fmt(vals[i], def.unit, def.decimals));
        v.style.color = c;
      });
    } else if (p.type === "table") {
      const org = (p.transformations || []).find((t) => t.id === "organize")?.options || {};
      const cols = [...new Set(p.series.flatMap((s) => Object.keys(s.metric)))]
        .filter((c) => !(org.excludeByName || {})[c])
        .sort((a, b) => ((org.indexByName || {})[a] ?? 99) - ((org.indexByName || {})[b] ?? 99));
      const t = el("table", "", body);
      const hr = el("tr", "", el("thead", "", t));
      for (const c of cols) el("th", "", hr, c);
      const tb = el("tbody", "", t);
      for (const s of p.series) {
        const r = el("tr", "", tb);
        for (const c of cols) el("td", "", r, s.metric[c] ?? "").title = s.metric[c] ?? "";
      }
    } else if (p.type === "timeseries") {
      const custom = def.custom || {};
      const stacked = custom.stacking && custom.stacking.mode === "normal";
      const bars = custom.drawStyle === "bars";
      const idx = new Map(p.grid.map((t, i) => [t, i]));
      let ys = p.series.map((s) => {
        const a = new Array(p.grid.length).fill(null);
        for (const [t, v] of s.values) if (idx.has(t) && !Number.isNaN(v)) a[idx.get(t)] = v;
        return a;
      });
      const colors = p.series.map((s, i) => {
        const c = prop(p, s.name, "color", null);
        return c && c.fixedColor ? color(c.fixedColor) : classic[i % classic.length];
      });
      if (stacked) { // cumulative, drawn largest first so each band shows
        const acc = new Array(p.grid.length).fill(null);
        ys = ys.map((a) => a.map((v, i) => (v === null ? acc[i] : (acc[i] = (acc[i] ?? 0) + v))).slice());
      }
      const order = stacked ? ys.map((_, i) => i).reverse() : ys.map((_, i) => i);
      const plotEl = el("div", "", body);
      const lg = el("div", "legend", body);
      p.series.forEach((s, i) => {
        const item = el("span", "", lg);
        el("i", "", item).style.background = colors[i];
        item.appendChild(document.createTextNode(s.name));
      });
      const w = body.clientWidth, h = body.clientHeight - lg.offsetHeight - 4;
      const axis = { stroke: "#ccccdc", grid: { stroke: "#ffffff12", width: 1 }, ticks: { stroke: "#ffffff12", width: 1 }, font: "11px Inter, Arial, sans-serif" };
      const thresholdLine = custom.thresholdsStyle && custom.thresholdsStyle.mode !== "off" ? def.thresholds.steps.filter((s) => s.value !== null) : [];
      const yMax = Math.max(...ys.flat().filter((v) => v !== null), ...thresholdLine.map((s) => s.value * 1.15), 0);
      const opts = {
        width: w, height: h, legend: { show: false }, cursor: { show: false },
        tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
        scales: { x: { time: true }, y: { range: [def.min ?? 0, yMax > 0 ? yMax * 1.05 : 1] } },
        axes: [{ ...axis, space: 70,
          values: (u, splits) => splits.map((t) => new Date(t * 1000).toISOString().slice(11, splits.some((x) => x % 60) ? 19 : 16)) }, { ...axis, size: 64, values: (u, splits) => splits.map((v) => fmt(v, def.unit)),
          ...(def.decimals === 0 ? { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] } : {}) }],
        series: [{}, ...order.map((i) => ({
          label: p.series[i].name, stroke: colors[i], width: prop(p, p.series[i].name, "custom.lineWidth", custom.lineWidth || 1),
          fill: colors[i] + (bars ? "cc" : stacked ? "40" : "1a"), spanGaps: false, points: { show: false },
          paths: bars ? uPlot.paths.bars({ size: [0.7, 60], align: 0 }) : undefined,
        }))],
        hooks: { draw: [(u) => {
          const ctx = u.ctx;
          for (const s of thresholdLine) {
            const y = u.valToPos(s.value, "y", true);
            ctx.save(); ctx.strokeStyle = color(s.color); ctx.lineWidth = 1.5 * devicePixelRatio; ctx.setLineDash([10, 10]);
            ctx.beginPath(); ctx.moveTo(u.bbox.left, y); ctx.lineTo(u.bbox.left + u.bbox.width, y); ctx.stroke(); ctx.restore();
          }
        }] },
      };
      new uPlot(opts, [p.grid, ...order.map((i) => ys[i])], plotEl);
    }
  }
}
