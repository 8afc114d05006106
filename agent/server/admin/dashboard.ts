// The dashboard at /ui: one self-contained page (no build step, no CDN: clusters are often
// air-gapped). It polls /metrics and /debug/state once a second, keeps the last minutes of
// samples in the page, and draws its own SVG charts. Every number on it comes from a named
// Prometheus series, so what the page says can be checked against /metrics (the browser test does).
export const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Kinference agent</title>
<style>
  :root { font-family: system-ui, sans-serif; color: #1b1f24; background: #f6f8fa; }
  body { margin: 0 auto; max-width: 1180px; padding: 16px; }
  h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 0 0 8px; }
  .sub { color: #57606a; font-size: 13px; }
  .tiles { display: flex; gap: 10px; flex-wrap: wrap; margin: 12px 0; }
  .tile { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; padding: 8px 14px; min-width: 110px; }
  .tile b { display: block; font-size: 22px; }
  .grid { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
  .card { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; padding: 10px 12px; margin-bottom: 12px; min-width: 0; }
  .wide { grid-column: 1 / -1; }
  table { border-collapse: collapse; width: 100%; font-size: 13px; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eaeef2; }
  th { background: #f0f3f6; font-weight: 600; }
  td:first-child { white-space: nowrap; }
  td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
  .bad { color: #cf222e; } .ok { color: #1a7f37; } .warn { color: #9a6700; }
  .nodata { color: #8c959f; font-style: italic; font-size: 13px; padding: 6px 0; }
  .bar { display: inline-block; height: 8px; background: #0969da; border-radius: 2px; vertical-align: middle; }
  svg { width: 100%; height: auto; display: block; }
  svg text { font-size: 10px; fill: #57606a; }
  .legend { font-size: 12px; color: #57606a; display: flex; flex-wrap: wrap; gap: 10px; margin-top: 4px; }
  .legend i { display: inline-block; width: 14px; height: 3px; vertical-align: middle; margin-right: 4px; }
  ul { margin: 4px 0; padding-left: 18px; font-size: 13px; }
</style>
</head>
<body>
<h1>Kinference agent <span id="node"></span></h1>
<div class="sub" id="status">loading…</div>
<div class="tiles" id="tiles"></div>
<div class="grid">
  <div class="card" id="attainment-card">
    <h2>SLO attainment, last <span class="window-label"></span> — by route and whether the request may leave</h2>
    <div id="attainment-chart"></div>
    <table id="attainment"><thead><tr><th>route</th><th>may leave</th><th class="n">requests (window)</th><th class="n">within SLO (window)</th><th class="n">within SLO (all)</th></tr></thead><tbody></tbody></table>
  </div>
  <div class="card" id="ttft-card">
    <h2>TTFT per pod: measured (solid) vs predicted (dashed), streamed requests</h2>
    <div id="ttft-chart"></div>
    <table id="ttft"><thead><tr><th>pod</th><th class="n">requests</th><th class="n">measured mean</th><th class="n">predicted mean</th><th class="n">within predicted quantile</th></tr></thead><tbody></tbody></table>
  </div>
  <div class="card" id="overflow-card">
    <h2>Overflow: <span id="overflow-share">–</span> of requests left the cluster</h2>
    <div id="overflow-chart"></div>
    <table id="overflow"><thead><tr><th>provider</th><th>why no pod</th><th class="n">requests</th><th class="n">share of overflow</th></tr></thead><tbody></tbody></table>
  </div>
  <div class="card" id="admission-card">
    <h2>Admission: the quantile a request that may leave is admitted on, steered by measured attainment</h2>
    <table id="admission"><thead><tr><th>policy</th><th class="n">target</th><th class="n">admitted on</th><th class="n">measured (pods, window)</th><th class="n">local share (streamed, since start)</th><th class="n">error budget left</th><th>why</th></tr></thead><tbody></tbody></table>
  </div>
  <div class="card" id="budget-card">
    <h2>Overflow spend per tenant against its budget (this window) — waiting now: <span id="waiting">–</span></h2>
    <table id="budget"><thead><tr><th>tenant</th><th>window</th><th>unit</th><th class="n">used</th><th class="n">budget</th><th>share used</th></tr></thead><tbody></tbody></table>
  </div>
  <div class="card">
    <h2>Providers and circuit breakers</h2>
    <table id="providers"><thead><tr><th>provider</th><th>kind</th><th>breaker</th><th class="n">failures in a row</th><th class="n">ok</th><th class="n">failed</th><th class="n">skipped</th></tr></thead><tbody></tbody></table>
    <h2 style="margin-top:12px">Policies</h2>
    <div id="policies"></div>
  </div>
  <div class="card wide">
    <h2>Pods</h2>
    <table id="pods"><thead><tr><th>pod</th><th>where</th><th>models</th><th>queued (now / 30 s avg)</th><th>running</th><th>KV</th><th>predicted TTFT (256-token prompt)</th><th title="expected prefix-cached tokens of the last prompt routed; prompt blocks the agent remembers for the pod">cached (last prompt · blocks)</th><th>in flight</th><th>state</th></tr></thead><tbody></tbody></table>
  </div>
  <div class="card wide">
    <h2>Peers (gossip origins)</h2>
    <table id="peers"><thead><tr><th>origin</th><th class="n">pods</th><th class="n">last heard</th></tr></thead><tbody></tbody></table>
  </div>
</div>
<script>
const WINDOW_MS = 5 * 60 * 1000;   // what "last minutes" means on this page
const STEP_MS = 5 * 1000;          // each chart point summarises this much time
const COLORS = ['#0969da', '#1a7f37', '#cf222e', '#8250df', '#9a6700', '#bf3989', '#1b7c83', '#57606a'];
const history = [];                // { t, samples } per poll, newest last
for (const e of document.querySelectorAll('.window-label')) e.textContent = (WINDOW_MS / 60000) + ' min';

const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; };
const fmt = (x, d = 1) => (x === null || x === undefined || Number.isNaN(x) || !Number.isFinite(x)) ? '–' : Number(x).toFixed(d);
const pct = (num, den) => den > 0 ? (100 * num / den).toFixed(1) + '%' : '–';
function row(cells) { const tr = el('tr'); for (const c of cells) tr.append(c instanceof Node ? c : el('td', c)); return tr; }
function num(text) { return el('td', text, 'n'); }
function nodata(id, text) { const e = document.getElementById(id); e.replaceChildren(el('div', text, 'nodata')); }

// Prometheus text → [{ name, labels, value }]. Enough for prom-client's output: no timestamps, escaped label values.
function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\\{(.*)\\})?\\s+(\\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\\]|\\\\.)*)"/g)) labels[l[1]] = l[2].replace(/\\\\(.)/g, (_, c) => c === 'n' ? '\\n' : c);
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}
const series = (samples, name) => samples.filter((s) => s.name === name);
function sumBy(samples, name, keyOf, filter = () => true) {
  const out = new Map();
  for (const s of series(samples, name)) if (filter(s.labels)) { const k = keyOf(s.labels); out.set(k, (out.get(k) ?? 0) + s.value); }
  return out;
}
// The poll closest to, but not after, t ms ago (the base of a delta); the oldest when none is that old.
function sampleAgo(ms) {
  const t = history[history.length - 1].t - ms;
  let base = history[0];
  for (const h of history) { if (h.t <= t) base = h; else break; }
  return base;
}
const delta = (now, then, key) => (now.get(key) ?? 0) - (then?.get(key) ?? 0);

// 1, 2 or 5 times a power of ten, at least v: axis tops people can read.
function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 5, 10].map((m) => m * p).find((c) => c >= v);
}

// A line chart: series = [{ label, color, dashed, points: [[t, v]] }]; x is time over the window.
function lineChart(id, list, { yMax, unit, yFmt = (v) => fmt(v, 0) }) {
  const W = 540, H = 170, L = 58, R = 10, T = 8, B = 20;
  const host = document.getElementById(id);
  const now = history[history.length - 1].t;
  // The x axis spans what the page has seen, from one minute up to the whole window.
  const span = Math.min(WINDOW_MS, Math.max(60000, Math.ceil((now - history[0].t) / 60000) * 60000));
  const x = (t) => L + (W - L - R) * (1 - (now - t) / span);
  const top = yMax ?? niceCeil(Math.max(1e-9, ...list.flatMap((s) => s.points.map((p) => p[1]))) * 1.05);
  const y = (v) => T + (H - T - B) * (1 - Math.min(v, top) / top);
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  const add = (tag, attrs, text) => { const e = document.createElementNS(ns, tag); for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v)); if (text !== undefined) e.textContent = text; svg.append(e); return e; };
  for (let i = 0; i <= 4; i++) {
    const v = top * i / 4;
    add('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: '#eaeef2' });
    add('text', { x: L - 4, y: y(v) + 3, 'text-anchor': 'end' }, yFmt(v) + unit);
  }
  const tick = span <= 60000 ? 15000 : 60000;
  for (let m = 0; m <= span; m += tick) add('text', { x: x(now - m), y: H - 6, 'text-anchor': m === span ? 'start' : 'middle' }, m === 0 ? 'now' : '-' + (tick < 60000 ? m / 1000 + 's' : m / 60000 + 'm'));
  for (const s of list) {
    if (s.points.length === 0) continue;
    const d = s.points.map((p) => x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1)).join(' ');
    add('polyline', { points: d, fill: 'none', stroke: s.color, 'stroke-width': 2, 'stroke-dasharray': s.dashed ? '5 4' : 'none' });
    if (s.points.length === 1) add('circle', { cx: x(s.points[0][0]), cy: y(s.points[0][1]), r: 3, fill: s.color });
  }
  const legend = el('div', undefined, 'legend');
  for (const s of list.filter((s) => !s.dashed || !list.some((o) => !o.dashed && o.label === s.label))) {
    const item = el('span'); const sw = el('i'); sw.style.background = s.color; item.append(sw, s.label); legend.append(item);
  }
  host.replaceChildren(svg, legend);
}

// Points every STEP_MS over the window: value(now, then) for each pair of polls STEP_MS apart.
function stepped(value) {
  const points = [];
  const now = history[history.length - 1].t;
  for (let t = now; t > now - WINDOW_MS; t -= STEP_MS) {
    const end = [...history].reverse().find((h) => h.t <= t);
    // Early on (the page just opened), the first poll is the base.
    const start = [...history].reverse().find((h) => h.t <= t - STEP_MS) ?? (t === now ? history[0] : undefined);
    if (!end || !start || end === start) continue;
    const v = value(end.samples, start.samples);
    if (v !== undefined && Number.isFinite(v)) points.unshift([end.t, v]);
  }
  return points;
}

function renderAttainment(samples) {
  const name = 'kinference_slo_requests_total';
  if (series(samples, name).length === 0) {
    nodata('attainment-chart', 'no data: this agent does not export ' + name + ' yet');
    document.querySelector('#attainment tbody').replaceChildren();
    return;
  }
  const key = (l) => l.route + '|' + l.leavable;
  const all = (ss) => sumBy(ss, name, key);
  const within = (ss) => sumBy(ss, name, key, (l) => l.within_slo === 'true');
  const keys = [...all(samples).keys()].sort();
  const base = sampleAgo(WINDOW_MS).samples;
  const body = document.querySelector('#attainment tbody'); body.replaceChildren();
  const chart = [];
  keys.forEach((k, i) => {
    const [route, leavable] = k.split('|');
    const n = delta(all(samples), all(base), k), w = delta(within(samples), within(base), k);
    const tr = row([route, leavable === 'true' ? 'yes' : 'no', num(String(n)), num(pct(w, n)), num(pct(within(samples).get(k) ?? 0, all(samples).get(k)))]);
    tr.dataset.key = k;
    body.append(tr);
    chart.push({ label: route + (leavable === 'true' ? ' (may leave)' : ' (must stay)'), color: COLORS[i % COLORS.length], points: stepped((a, b) => { const n = delta(all(a), all(b), k); return n > 0 ? 100 * delta(within(a), within(b), k) / n : undefined; }) });
  });
  lineChart('attainment-chart', chart, { yMax: 100, unit: '%' });
}

function renderTtft(samples) {
  const name = 'kinference_pod_ttft_seconds';
  const sums = (ss, source) => sumBy(ss, name + '_sum', (l) => l.pod, (l) => l.source === source);
  const counts = (ss, source) => sumBy(ss, name + '_count', (l) => l.pod, (l) => l.source === source);
  const pods = [...counts(samples, 'measured').keys()].sort();
  const body = document.querySelector('#ttft tbody'); body.replaceChildren();
  if (pods.length === 0) { nodata('ttft-chart', 'no data: no streamed request has reached a local pod yet'); return; }
  const calibration = 'kinference_admission_calibration_total';
  const cal = sumBy(samples, calibration, (l) => l.pod + '|' + l.within_quantile);
  const hasCal = series(samples, calibration).length > 0;
  const chart = [];
  pods.forEach((pod, i) => {
    const n = counts(samples, 'measured').get(pod) ?? 0;
    const mean = (source) => 1000 * (sums(samples, source).get(pod) ?? 0) / Math.max(1, counts(samples, source).get(pod) ?? 0);
    const inQ = cal.get(pod + '|true') ?? 0, outQ = cal.get(pod + '|false') ?? 0;
    const tr = row([pod, num(String(n)), num(fmt(mean('measured'), 1) + ' ms'), num(fmt(mean('predicted'), 1) + ' ms'), num(hasCal ? pct(inQ, inQ + outQ) : 'no data')]);
    tr.dataset.pod = pod;
    body.append(tr);
    const color = COLORS[i % COLORS.length];
    for (const source of ['measured', 'predicted']) {
      chart.push({ label: pod, color, dashed: source === 'predicted', points: stepped((a, b) => {
        const c = delta(counts(a, source), counts(b, source), pod);
        return c > 0 ? 1000 * delta(sums(a, source), sums(b, source), pod) / c : undefined;
      }) });
    }
  });
  lineChart('ttft-chart', chart, { unit: ' ms' });
}

function renderOverflow(samples) {
  const byRoute = sumBy(samples, 'kinference_requests_total', (l) => l.route);
  const total = [...byRoute.values()].reduce((a, b) => a + b, 0);
  document.getElementById('overflow-share').textContent = pct(byRoute.get('overflow') ?? 0, total);
  const name = 'kinference_overflow_total';
  const counts = sumBy(samples, name, (l) => l.provider + '|' + l.reason);
  const body = document.querySelector('#overflow tbody'); body.replaceChildren();
  if (counts.size === 0) { nodata('overflow-chart', 'no data: nothing has overflowed'); return; }
  const overflowed = [...counts.values()].reduce((a, b) => a + b, 0);
  const entries = [...counts].sort((a, b) => b[1] - a[1]);
  const W = 540, rowH = 18, L = 170;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 ' + W + ' ' + (entries.length * rowH + 4));
  entries.forEach(([k, v], i) => {
    const [provider, reason] = k.split('|');
    const tr = row([provider, reason, num(String(v)), num(pct(v, overflowed))]);
    tr.dataset.key = k;
    body.append(tr);
    const label = document.createElementNS(ns, 'text');
    label.setAttribute('x', String(L - 6)); label.setAttribute('y', String(i * rowH + 13)); label.setAttribute('text-anchor', 'end');
    label.textContent = provider + ' · ' + reason;
    const bar = document.createElementNS(ns, 'rect');
    bar.setAttribute('x', String(L)); bar.setAttribute('y', String(i * rowH + 3)); bar.setAttribute('height', '12');
    bar.setAttribute('width', String(Math.max(1, (W - L - 60) * v / overflowed))); bar.setAttribute('fill', COLORS[i % COLORS.length]);
    const value = document.createElementNS(ns, 'text');
    value.setAttribute('x', String(L + Math.max(1, (W - L - 60) * v / overflowed) + 4)); value.setAttribute('y', String(i * rowH + 13));
    value.textContent = pct(v, overflowed);
    svg.append(label, bar, value);
  });
  document.getElementById('overflow-chart').replaceChildren(svg);
}

function renderState(s, samples) {
  document.getElementById('node').textContent = '· node ' + s.node;
  const byRoute = sumBy(samples, 'kinference_requests_total', (l) => l.route);
  const total = [...byRoute.values()].reduce((a, b) => a + b, 0);
  document.getElementById('status').textContent = (s.ready ? 'ready' : 'not ready') + ' · ' + total + ' requests · updated ' + new Date().toLocaleTimeString();
  const tiles = document.getElementById('tiles'); tiles.replaceChildren();
  for (const [name, value] of [...byRoute].sort()) { const t = el('div', undefined, 'tile'); t.dataset.route = name; t.append(el('b', String(value)), el('span', name)); tiles.append(t); }

  const attempts = sumBy(samples, 'kinference_provider_requests_total', (l) => l.provider + '|' + l.outcome);
  const providers = document.querySelector('#providers tbody'); providers.replaceChildren();
  for (const p of s.providers ?? []) {
    const state = p.breaker.state;
    providers.append(row([p.name, p.kind, el('td', state, state === 'closed' ? 'ok' : state === 'open' ? 'bad' : 'warn'), num(String(p.breaker.consecutiveFailures)),
      num(String(attempts.get(p.name + '|ok') ?? 0)), num(String(attempts.get(p.name + '|failed') ?? 0)), num(String(attempts.get(p.name + '|skipped') ?? 0))]));
  }
  const policies = document.getElementById('policies'); policies.replaceChildren();
  const loaded = el('ul'); for (const p of s.policies.loaded) loaded.append(el('li', p));
  if (s.policies.loaded.length === 0) loaded.append(el('li', 'none: the built-in default applies'));
  policies.append(loaded);
  const problems = el('ul'); for (const p of s.policies.problems) problems.append(el('li', p, 'bad'));
  policies.append(s.policies.problems.length ? problems : el('div', 'no problems', 'ok'));

  const body = document.querySelector('#pods tbody'); body.replaceChildren();
  for (const p of s.pods.local) {
    const l = p.load || {};
    const ttft = p.predictedTtftMs;
    const bar = el('span', undefined, 'bar'); bar.style.width = Math.min(120, ttft / 10) + 'px';
    const ttftCell = el('td'); ttftCell.append(bar, ' ' + fmt(ttft, 0) + ' ms');
    body.append(row([p.pod.name, 'local', p.pod.models.join(', '), fmt(l.waiting, 0) + ' / ' + fmt(p.queuedAvg30s, 2), fmt(l.running, 0), fmt((l.kvCache ?? NaN) * 100, 0) + '%', ttftCell, fmt(p.prefix.lastRequestCachedTokens, 0) + ' · ' + fmt(p.prefix.blocks, 0), String(p.inFlight), el('td', p.healthy && p.ageMs < 1000 ? 'ok' : 'stale/unhealthy', p.healthy && p.ageMs < 1000 ? 'ok' : 'bad')]));
  }
  for (const p of s.pods.remote) {
    body.append(row([p.pod.name, 'peer ' + p.origin, p.pod.models.join(', '), fmt(p.queuedNow, 0) + ' / ' + fmt(p.queued, 2), fmt(p.running, 0), fmt(p.kvCache * 100, 0) + '%', fmt(p.predictedTtftMs, 0) + ' ms', '—', String(p.traffic ? p.traffic.inFlight : 0), el('td', 'age ' + fmt(p.ageMs, 0) + ' ms')]));
  }
  const peers = document.querySelector('#peers tbody'); peers.replaceChildren();
  const origins = s.gossip?.origins ?? [];
  if (origins.length === 0) peers.append(row([s.gossip ? 'no peer heard yet' : 'gossip is off on this agent', '', '']));
  for (const o of origins) peers.append(row([o.origin, num(String(o.pods)), num(fmt(o.ageMs, 0) + ' ms ago')]));
}

// Spend per tenant: kinference_overflow_budget_used against used + remaining, per limit and unit.
function renderBudget(samples) {
  const waiting = sumBy(samples, 'kinference_waiting_requests', (l) => l.priority);
  document.getElementById('waiting').textContent = [...waiting].map(([p, n]) => p + ' ' + n).join(', ') || '–';
  const remaining = new Map(series(samples, 'kinference_overflow_budget_remaining').map((s) => [s.labels.tenant + '|' + s.labels.window + '|' + s.labels.unit, s.value]));
  const body = document.querySelector('#budget tbody');
  body.replaceChildren();
  for (const s of series(samples, 'kinference_overflow_budget_used')) {
    const left = remaining.get(s.labels.tenant + '|' + s.labels.window + '|' + s.labels.unit);
    if (left === undefined) continue; // a unit this limit does not bound
    const limit = s.value + left;
    const share = limit > 0 ? s.value / limit : 1;
    const bar = el('td');
    const fill = el('div');
    fill.style.cssText = 'height:10px;background:' + (share >= 1 ? '#c0392b' : '#2e86de') + ';width:' + Math.round(Math.min(1, share) * 120) + 'px';
    bar.append(fill);
    body.append(row([s.labels.tenant, s.labels.window, s.labels.unit, num(fmt(s.value, 0)), num(fmt(limit, 0)), bar]));
  }
  if (body.children.length === 0) body.append(row(['no tenant has overflowed under a budget yet', '', '', '', '', '']));
}

// The admission loop per policy (/debug/state), beside the local share of requests in the window.
function renderAdmission(state, samples) {
  const body = document.querySelector('#admission tbody');
  body.replaceChildren();
  const byRoute = sumBy(samples, 'kinference_slo_requests_total', (l) => l.route);
  let all = 0, local = 0;
  for (const [route, n] of byRoute) { all += n; if (route === 'local' || route === 'peer') local += n; }
  const share = pct(local, all);
  const pctOf = (x) => (Number.isFinite(x) ? (Math.round(x * 1000) / 10) + '%' : '–');
  for (const { policy, state: a } of state.admission ?? [])
    body.append(row([policy, num(pctOf(a.target)), num(pctOf(a.quantile)), num(pctOf(a.attainment) + ' of ' + a.measured), num(share), num(pctOf(Math.max(0, a.budgetLeft))), a.why]));
  if (body.children.length === 0) body.append(row(['no request has been admitted yet', '', '', '', '', '', '']));
}

async function refresh() {
  try {
    const [metricsText, state] = await Promise.all([fetch('/metrics').then((r) => r.text()), fetch('/debug/state').then((r) => r.json())]);
    const samples = parseMetrics(metricsText);
    const t = Date.now();
    history.push({ t, samples });
    while (history.length > 2 && history[1].t < t - WINDOW_MS - STEP_MS) history.shift();
    renderState(state, samples);
    renderAttainment(samples);
    renderTtft(samples);
    renderOverflow(samples);
    renderBudget(samples);
    renderAdmission(state, samples);
    document.body.dataset.polls = String(Number(document.body.dataset.polls ?? 0) + 1);
  } catch (e) { document.getElementById('status').textContent = 'cannot reach the agent: ' + e; }
}
refresh(); setInterval(refresh, 1000);
</script>
</body>
</html>
`;
