// The dashboard at /ui: one self-contained page (no build step, no CDN: clusters are often
// air-gapped) that polls /debug/state once a second.
export const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Kinference agent</title>
<style>
  :root { font-family: system-ui, sans-serif; color: #1b1f24; background: #f6f8fa; }
  body { margin: 0 auto; max-width: 1100px; padding: 16px; }
  h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 20px 0 6px; }
  .sub { color: #57606a; font-size: 13px; }
  .tiles { display: flex; gap: 10px; flex-wrap: wrap; margin-top: 12px; }
  .tile { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; padding: 10px 14px; min-width: 130px; }
  .tile b { display: block; font-size: 22px; }
  table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid #d0d7de; font-size: 13px; }
  th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #eaeef2; }
  th { background: #f0f3f6; font-weight: 600; }
  .bad { color: #cf222e; } .ok { color: #1a7f37; }
  .bar { display: inline-block; height: 8px; background: #0969da; border-radius: 2px; vertical-align: middle; }
</style>
</head>
<body>
<h1>Kinference agent <span id="node"></span></h1>
<div class="sub" id="status">loading…</div>
<div class="tiles" id="tiles"></div>
<h2>Pods</h2>
<table id="pods"><thead><tr><th>pod</th><th>where</th><th>models</th><th>queued (now / 30 s avg)</th><th>running</th><th>KV</th><th>predicted TTFT (256-token prompt)</th><th>in flight</th><th>state</th></tr></thead><tbody></tbody></table>
<h2>Peers</h2>
<table id="peers"><thead><tr><th>origin</th><th>pods</th><th>last heard</th></tr></thead><tbody></tbody></table>
<script>
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; };
const fmt = (x, d = 1) => (x === null || x === undefined || Number.isNaN(x)) ? '–' : Number(x).toFixed(d);
function row(cells) { const tr = el('tr'); for (const c of cells) tr.append(c instanceof Node ? c : el('td', c)); return tr; }
async function refresh() {
  try {
    const s = await (await fetch('/debug/state')).json();
    document.getElementById('node').textContent = '· node ' + s.node;
    document.getElementById('status').textContent = (s.ready ? 'ready' : 'not ready') + ' · ' + s.requests.total + ' requests · updated ' + new Date().toLocaleTimeString();
    const tiles = document.getElementById('tiles'); tiles.replaceChildren();
    for (const [name, value] of Object.entries(s.requests.byRoute)) { const t = el('div', undefined, 'tile'); t.append(el('b', String(value)), el('span', name)); tiles.append(t); }
    const body = document.querySelector('#pods tbody'); body.replaceChildren();
    for (const p of s.pods.local) {
      const l = p.load || {};
      const ttft = p.predictedTtftMs;
      const bar = el('span', undefined, 'bar'); bar.style.width = Math.min(120, ttft / 10) + 'px';
      const ttftCell = el('td'); ttftCell.append(bar, ' ' + fmt(ttft, 0) + ' ms');
      body.append(row([p.pod.name, 'local', p.pod.models.join(', '), fmt(l.waiting, 0) + ' / ' + fmt(p.queuedAvg30s, 2), fmt(l.running, 0), fmt((l.kvCache ?? NaN) * 100, 0) + '%', ttftCell, String(p.inFlight), el('td', p.healthy && p.ageMs < 1000 ? 'ok' : 'stale/unhealthy', p.healthy && p.ageMs < 1000 ? 'ok' : 'bad')]));
    }
    for (const p of s.pods.remote) {
      const ttft = p.predictedTtftMs;
      body.append(row([p.pod.name, 'peer ' + p.origin, p.pod.models.join(', '), fmt(p.queuedNow, 0) + ' / ' + fmt(p.queued, 2), fmt(p.running, 0), fmt(p.kvCache * 100, 0) + '%', fmt(ttft, 0) + ' ms', String(p.traffic ? p.traffic.inFlight : 0), el('td', 'age ' + fmt(p.ageMs, 0) + ' ms')]));
    }
    const peers = document.querySelector('#peers tbody'); peers.replaceChildren();
    for (const o of s.gossip?.origins ?? []) peers.append(row([o.origin, String(o.pods), fmt(o.ageMs, 0) + ' ms ago']));
  } catch (e) { document.getElementById('status').textContent = 'cannot reach the agent: ' + e; }
}
refresh(); setInterval(refresh, 1000);
</script>
</body>
</html>
`;
