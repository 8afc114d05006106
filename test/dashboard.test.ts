// The dashboard in a real browser (the system Chromium, else the npm-packaged one, via
// playwright-core). The numbers the page shows are checked against the agent's own /metrics,
// and a screenshot is taken while the agent is under load.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser, Page } from 'playwright-core';
import { DASHBOARD_HTML } from '../agent/server/admin/dashboard.ts';
import { parsePromText } from '../agent/telemetry/promtext.ts';
import type { MetricPage } from '../agent/telemetry/metric-page.ts';
import { launchChromium, SYSTEM_CHROMIUM } from './helpers/browser.ts';
import { startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

const pct = (num: number, den: number) => (den > 0 ? `${((100 * num) / den).toFixed(1)}%` : '–');

describe('dashboard', () => {
  let stack: Stack;
  let provider: OpenAIStandin;
  let browser: Browser;
  let page: Page;

  before(async () => {
    provider = await startOpenAIStandin();
    stack = await startStack({
      pods: [{}, { speed: 0.5 }],
      config: {
        providers: [{ name: 'hosted', kind: 'openai', endpoint: provider.url, models: { [MODEL]: 'hosted-llama' } }],
        policies: [
          // Everyone else stays (a pod briefly stale on a loaded machine makes them wait, not leave).
          { metadata: { name: 'default', namespace: '*' }, spec: { slo: { ttft: '10s' }, wait: { max: '10s' } } },
          // Tenant "leave": no pod meets a 1 ms SLO, so its requests overflow (reason over-slo).
          {
            metadata: { name: 'leave', namespace: 'leave' },
            spec: { slo: { ttft: '1ms' }, exclude: [], overflow: { providers: ['hosted'] } },
          },
        ],
      },
    });
    const launched = await launchChromium();
    browser = launched.browser;
    // The system one whenever present; the packaged one only when it is not.
    assert.equal(launched.source, existsSync(SYSTEM_CHROMIUM) ? 'system' : 'packaged');
    page = await browser.newPage({ viewport: { width: 1220, height: 900 } });
  });
  after(async () => {
    await browser?.close();
    await stack?.close();
    await provider?.close();
  });

  const send = async (tenant: string, extra: Record<string, unknown> = {}) => {
    const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody('Hello there', extra), {
      'x-kinference-tenant': tenant,
    });
    await res.arrayBuffer();
    return res.headers.get('x-kinference-route') ?? '';
  };
  const metrics = async (): Promise<MetricPage> => parsePromText(await (await fetch(`${stack.admin}/metrics`)).text());
  const polls = async () => Number(await page.evaluate(() => document.body.dataset.polls ?? 0));
  /** Waits for a poll that started after now, so the page shows what /metrics says now. */
  const freshPoll = async () => {
    const seen = await polls();
    await waitFor(async () => (await polls()) >= seen + 2, 10_000, 'two more dashboard polls');
  };

  it('shows requests per route, TTFT per pod, overflow by reason and provider, as /metrics says', async () => {
    for (let i = 0; i < 4; i++) assert.match(await send('team-a', { stream: true }), /^local\//);
    for (let i = 0; i < 2; i++) assert.match(await send('team-a'), /^local\//);
    for (let i = 0; i < 3; i++) assert.equal(await send('leave'), 'overflow/hosted');

    await page.goto(`${stack.admin}/ui`);
    await freshPoll();
    const m = await metrics();

    // Tiles: requests by route.
    const tiles = await page.$$eval('#tiles .tile', (ts) =>
      ts.map((t) => [(t as HTMLElement).dataset.route, t.querySelector('b')?.textContent]),
    );
    const routes = new Map<string, number>();
    for (const s of m.series('kinference_requests_total'))
      routes.set(s.labels.route, (routes.get(s.labels.route) ?? 0) + s.value);
    assert.deepEqual(new Map(tiles.map(([r, v]) => [r, Number(v)])), routes);
    assert.deepEqual([...routes].sort(), [
      ['local', 6],
      ['overflow', 3],
    ]);
    assert.match((await page.textContent('#status')) ?? '', /^ready · 9 requests/);

    // Overflow share, and overflow by provider and reason.
    const total = m.sum('kinference_requests_total') ?? 0;
    assert.equal(
      await page.textContent('#overflow-share'),
      pct(m.sum('kinference_requests_total', { route: 'overflow' }) ?? 0, total),
    );
    const overflowRows = await page.$$eval('#overflow tbody tr', (trs) =>
      trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
    );
    const overflowed = m.series('kinference_overflow_total');
    assert.equal(overflowRows.length, overflowed.length);
    for (const s of overflowed) {
      assert.ok(
        overflowRows.some((r) => r[0] === s.labels.provider && r[1] === s.labels.reason && Number(r[2]) === s.value),
        JSON.stringify(overflowRows),
      );
    }
    // All three overflowed to hosted; the reason is over-slo, or stale when a loaded machine
    // delays a scrape past the pod's age limit at that moment (both are true reasons).
    assert.equal(
      overflowRows.reduce((sum, r) => sum + Number(r[2]), 0),
      3,
    );
    for (const r of overflowRows)
      assert.ok(r[0] === 'hosted' && ['over-slo', 'stale'].includes(r[1] ?? ''), JSON.stringify(r));
    assert.ok(await page.$('#overflow-chart svg rect'), 'the overflow bars are drawn');

    // TTFT per pod: measured and predicted means from the per-pod histograms (streamed requests).
    const ttftRows = await page.$$eval('#ttft tbody tr', (trs) =>
      trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
    );
    let streamed = 0;
    for (const row of ttftRows) {
      const measured = m.histogram('kinference_pod_ttft_seconds', { pod: row[0]!, source: 'measured' })!;
      const predicted = m.histogram('kinference_pod_ttft_seconds', { pod: row[0]!, source: 'predicted' })!;
      assert.equal(Number(row[1]), measured.count);
      assert.equal(row[2], `${((1000 * measured.sum) / measured.count).toFixed(1)} ms`);
      assert.equal(row[3], `${((1000 * predicted.sum) / predicted.count).toFixed(1)} ms`);
      streamed += measured.count;
    }
    assert.equal(streamed, 4);
    assert.ok(
      await page.$('#ttft-chart svg'),
      'the TTFT chart is drawn (its lines start with traffic seen while the page is open)',
    );

    // SLO attainment (issue 9's series): compared when exported, otherwise the page says so.
    if (m.has('kinference_slo_requests_total')) {
      const rows = await page.$$eval('#attainment tbody tr', (trs) =>
        trs.map((tr) => [(tr as HTMLElement).dataset.key, tr.querySelectorAll('td')[4]?.textContent]),
      );
      for (const [key, shown] of rows) {
        const [route, leavable] = key!.split('|');
        const all = m.sum('kinference_slo_requests_total', { route, leavable }) ?? 0;
        const within = m.sum('kinference_slo_requests_total', { route, leavable, within_slo: 'true' }) ?? 0;
        assert.equal(shown, pct(within, all));
      }
    } else {
      assert.match(
        (await page.textContent('#attainment-chart')) ?? '',
        /no data: this agent does not export kinference_slo_requests_total/,
      );
    }

    // Providers with their breakers, policies, pods.
    const providers = await page.$$eval('#providers tbody tr', (trs) =>
      trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
    );
    assert.deepEqual(providers, [
      [
        'hosted',
        'openai',
        'closed',
        '0',
        String(m.sum('kinference_provider_requests_total', { provider: 'hosted', outcome: 'ok' })),
        '0',
        '0',
      ],
    ]);
    assert.match((await page.textContent('#policies')) ?? '', /\*\/default.*leave\/leave.*no problems/s);
    const pods = await page.$$eval('#pods tbody tr', (trs) =>
      trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent ?? '')),
    );
    assert.deepEqual(
      pods.map((r) => r[0]),
      ['pod-0', 'pod-1'],
    );
    // (The state column is not checked: under a loaded test machine a scrape may be late.)
    for (const row of pods) assert.match(row[6], /\d+ ms/);
    assert.equal(await page.textContent('#peers tbody'), 'gossip is off on this agent');
    assert.equal(await page.textContent('#budget tbody'), 'no tenant has overflowed under a budget yet');
    assert.match((await page.textContent('#waiting')) ?? '', /^critical 0, standard 0, sheddable 0$/);
  });

  it('shows SLO attainment and calibration from the series issue 9 exports, as their /metrics says', async () => {
    // An admin stand-in serving the real page, with those two series growing on every scrape.
    let scrapes = 0;
    const server = createServer((req, res) => {
      if (req.url === '/ui') return void res.writeHead(200, { 'content-type': 'text/html' }).end(DASHBOARD_HTML);
      if (req.url === '/debug/state') {
        return void res.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            node: 'n',
            ready: true,
            pods: { local: [], remote: [] },
            policies: { loaded: [], problems: ['two policies tie'] },
            providers: [],
          }),
        );
      }
      scrapes++;
      const lines = [
        `kinference_slo_requests_total{route="local",leavable="true",within_slo="true"} ${90 * scrapes}`,
        `kinference_slo_requests_total{route="local",leavable="true",within_slo="false"} ${10 * scrapes}`,
        `kinference_slo_requests_total{route="overflow",leavable="true",within_slo="true"} ${3 * scrapes}`,
        `kinference_slo_requests_total{route="local",leavable="false",within_slo="true"} ${7 * scrapes}`,
        `kinference_slo_requests_total{route="local",leavable="false",within_slo="false"} ${1 * scrapes}`,
        `kinference_admission_calibration_total{pod="gpu-0",within_quantile="true"} ${19 * scrapes}`,
        `kinference_admission_calibration_total{pod="gpu-0",within_quantile="false"} ${1 * scrapes}`,
        `kinference_pod_ttft_seconds_sum{pod="gpu-0",source="measured"} ${0.2 * scrapes}`,
        `kinference_pod_ttft_seconds_count{pod="gpu-0",source="measured"} ${scrapes}`,
        `kinference_pod_ttft_seconds_sum{pod="gpu-0",source="predicted"} ${0.18 * scrapes}`,
        `kinference_pod_ttft_seconds_count{pod="gpu-0",source="predicted"} ${scrapes}`,
      ];
      res.writeHead(200, { 'content-type': 'text/plain' }).end(lines.join('\n') + '\n');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const other = await browser.newPage({ viewport: { width: 1220, height: 900 } });
    try {
      await other.goto(`http://127.0.0.1:${(server.address() as AddressInfo).port}/ui`);
      await waitFor(
        async () => Number(await other.evaluate(() => document.body.dataset.polls ?? 0)) >= 3,
        10_000,
        'three polls',
      );
      const rows = await other.$$eval('#attainment tbody tr', (trs) =>
        trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
      );
      // Every poll adds the same mix, so the window and all-time shares agree: 90 %, 87.5 %, 100 %.
      assert.deepEqual(
        rows.map((r) => [r[0], r[1], r[3], r[4]]),
        [
          ['local', 'no', '87.5%', '87.5%'],
          ['local', 'yes', '90.0%', '90.0%'],
          ['overflow', 'yes', '100.0%', '100.0%'],
        ],
      );
      assert.ok(await other.$('#attainment-chart svg polyline'), 'the attainment chart is drawn');
      const ttft = await other.$$eval('#ttft tbody tr td', (tds) => tds.map((td) => td.textContent));
      assert.equal(ttft[4], '95.0%', 'share within the predicted quantile');
      assert.match((await other.textContent('#policies')) ?? '', /two policies tie/);
    } finally {
      await other.close();
      server.closeAllConnections();
      server.close();
    }
  });

  it('keeps drawing under load, and the screenshot shows it', async () => {
    const stop = new AbortController();
    const loop = async (tenant: string) => {
      while (!stop.signal.aborted) await send(tenant, { stream: true, max_tokens: 24 }).catch(() => {});
    };
    if (!page.url().endsWith('/ui')) await page.goto(`${stack.admin}/ui`);
    const workers = [...Array.from({ length: 3 }, () => loop('team-a')), loop('leave')];
    try {
      const before = (await metrics()).sum('kinference_requests_total') ?? 0;
      await freshPoll();
      await freshPoll();
      const path = process.env.KINFERENCE_SCREENSHOT ?? join(tmpdir(), `kinference-dashboard-${process.pid}.png`);
      await page.screenshot({ path, fullPage: true });
      const png = readFileSync(path);
      assert.deepEqual([...png.subarray(1, 4)], [...Buffer.from('PNG')]);
      assert.ok(png.byteLength > 20_000, `a real page, not a blank one (${png.byteLength} bytes)`);
      const answered = ((await metrics()).sum('kinference_requests_total') ?? 0) - before;
      assert.ok(answered > 10, `the agent served requests while the page was drawn (${answered})`);
    } finally {
      stop.abort();
      await Promise.all(workers);
    }
    assert.ok((await page.$$('#ttft-chart svg polyline')).length >= 2, 'measured and predicted lines');
  });
});
