// Filtered scrapes (`/metrics?name[]=…`): the simulator answers them as prometheus_client does, the
// scraper asks for them where the engine's server can answer, and falls back to the whole page
// wherever an answer falls short.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { Scraper, type ScraperOptions } from '../agent/telemetry/scraper.ts';
import { ADAPTERS, filteredTarget } from '../agent/telemetry/adapters.ts';
import type { PodLoad } from '../agent/types.ts';
import { startSim } from '../shared/sim/server.ts';
import { answerNameFilter, requestedNames, restrictPage } from '../shared/sim/name-filter.ts';
import { waitFor } from './helpers/wait.ts';
import { scrapedPod } from './helpers/scrape-fixtures.ts';

const fixture = (file: string) =>
  readFileSync(new URL(`./fixtures/model-server-metrics/${file}`, import.meta.url), 'utf8');
const VLLM_V1 = fixture('vllm-v1.txt');
const query = (target: string) => target.slice(target.indexOf('?') + 1);

const pod = scrapedPod;

function recordingScraper(options: ScraperOptions) {
  const loads: PodLoad[] = [];
  const errors: string[] = [];
  const scraper = new Scraper(
    options,
    (_p, load) => loads.push(load),
    (_p, error) => errors.push(error),
  );
  return { scraper, loads, errors };
}

/** A /metrics server whose answer to each request target is `answer`'s; records the targets. */
async function pageServer(answer: (target: string, res: ServerResponse) => void) {
  const targets: string[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    targets.push(req.url ?? '');
    answer(req.url ?? '', res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    targets,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const sendPage = (res: ServerResponse, body: string) =>
  res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(body);

/** What a load says, without its time. */
const content = ({ at: _at, ...rest }: PodLoad) => rest;

// ── The simulator's answer: prometheus_client's restricted registry ───────────────────────────────

test('name[] is read as parse_qs reads it: percent and plus decoded, repeated, blank values dropped', () => {
  assert.deepEqual(
    [...(requestedNames('name%5B%5D=vllm%3Anum_requests_waiting&name[]=a+b&name[]=&other=1&name[]') ?? [])],
    ['vllm:num_requests_waiting', 'a b'],
  );
  assert.equal(requestedNames('name[]='), undefined, 'a blank value is no filter: the whole page');
  assert.equal(requestedNames(''), undefined);
  assert.deepEqual([...(requestedNames('name[]=%zz%E2%82%AC') ?? [])], ['%zz€'], 'a malformed escape is kept');
});

test('a restricted page keeps only the samples named, by sample name, with their families’ HELP and TYPE', () => {
  const page = restrictPage(
    VLLM_V1,
    new Set([
      'vllm:num_requests_waiting',
      'vllm:time_to_first_token_seconds_sum',
      'vllm:prompt_tokens_total',
      'vllm:e2e_request_latency_seconds', // a histogram's family name: no sample is called that
      'vllm:no_such_metric',
    ]),
  );
  assert.deepEqual(
    page
      .split('\n')
      .filter((line) => line !== '' && !line.startsWith('#'))
      .map((line) => line.split(/[{ ]/)[0]),
    ['vllm:num_requests_waiting', 'vllm:prompt_tokens_total', 'vllm:time_to_first_token_seconds_sum'],
  );
  assert.match(page, /^# HELP vllm:num_requests_waiting .*\n# TYPE vllm:num_requests_waiting gauge\n/);
  assert.match(page, /# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_sum\{/);
  assert.doesNotMatch(page, /_created|_bucket|e2e_request_latency/, 'unnamed samples and their families are gone');
  assert.deepEqual(restrictPage(VLLM_V1, new Set(['vllm:prompt_tokens_created'])).match(/^# TYPE.*$/gm), [
    '# TYPE vllm:prompt_tokens_created gauge',
  ]);
  assert.equal(restrictPage(VLLM_V1, new Set(['nothing'])), '', 'no sample named: an empty 200 page');
  const openMetrics = fixture('vllm-v1-openmetrics.txt');
  assert.equal(restrictPage(openMetrics, new Set(['nothing'])), '# EOF\n');
  assert.match(
    restrictPage(openMetrics, new Set(['vllm:prompt_tokens_total'])),
    /^# HELP vllm:prompt_tokens .*\n# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total\{[^\n]*\n# EOF\n$/,
  );
  assert.equal(answerNameFilter(VLLM_V1, 'name[]=vllm:num_requests_waiting', 'empty'), '', 'multiprocess registry');
  assert.equal(answerNameFilter(VLLM_V1, 'other=1', 'empty'), VLLM_V1, 'no name[]: the whole page');
});

test('the vLLM sim filters at /metrics/ (prometheus_client) and not at /metrics (the instrumentator); TGI never', async (t) => {
  const vllm = await startSim({ engine: 'vllm', seed: 1 });
  const tgi = await startSim({ engine: 'tgi', seed: 1 });
  t.after(() => Promise.all([vllm.close(), tgi.close()]));
  const get = async (url: string) => {
    const res = await fetch(url);
    return { status: res.status, text: await res.text() };
  };
  const whole = (await get(`${vllm.url}/metrics`)).text;
  const target = filteredTarget(ADAPTERS.vllm)!;
  assert.ok(target.startsWith('/metrics/?name%5B%5D='), target);
  assert.equal((await get(`${vllm.url}/metrics?${query(target)}`)).text.length, whole.length, 'ignored at /metrics');
  const filtered = (await get(`${vllm.url}${target}`)).text;
  assert.equal(filtered, restrictPage(whole, requestedNames(query(target))!));
  assert.ok(filtered.length * 5 < whole.length, `${filtered.length} vs ${whole.length} bytes`);
  const tgiWhole = (await get(`${tgi.url}/metrics?name[]=tgi_queue_size`)).text;
  assert.match(tgiWhole, /tgi_request_duration_bucket/, 'TGI renders the whole page whatever the query');
  assert.equal((await get(`${tgi.url}/metrics/`)).status, 404);
});

// ── The scraper ──────────────────────────────────────────────────────────────────────────────────

test('a vLLM pod is scraped filtered after its first whole page, reading the same load from a page several times smaller', async (t) => {
  // Two idle sims of one seed: the same numbers on their pages; one scraped filtered, one whole.
  const seen: string[] = [];
  const sim = await startSim({ engine: 'vllm', seed: 1, onRequest: (r) => seen.push(`${r.path}?${r.query}`) });
  const twin = await startSim({ engine: 'vllm', seed: 1, onRequest: (r) => seen.push(`twin ${r.path}?${r.query}`) });
  const filtered = recordingScraper({ intervalMs: 25 });
  const whole = recordingScraper({ intervalMs: 25, filter: false });
  t.after(async () => {
    await Promise.all([filtered.scraper.stop(), whole.scraper.stop()]);
    await Promise.all([sim.close(), twin.close()]);
  });
  const p = pod('llama-0', sim.url.slice('http://'.length));
  const q = pod('llama-1', twin.url.slice('http://'.length));
  filtered.scraper.setPods([p]);
  whole.scraper.setPods([q]);
  filtered.scraper.start();
  whole.scraper.start();
  await waitFor(() => filtered.loads.length >= 4 && whole.loads.length >= 4, 5000, 'four loads each');
  assert.deepEqual([...filtered.errors, ...whole.errors], []);
  const mine = seen.filter((target) => !target.startsWith('twin '));
  assert.equal(mine[0], '/metrics?', 'the first scrape (engine unknown) reads the whole page');
  assert.equal(mine[1], filteredTarget(ADAPTERS.vllm), 'then only the adapter’s samples are asked for');
  assert.ok(mine.length <= filtered.loads.length + 1, 'one request per load: no fallback');
  assert.ok(
    seen.filter((target) => target.startsWith('twin ')).every((target) => target === 'twin /metrics?'),
    'filter: false asks for the whole page',
  );
  const health = filtered.scraper.health(p.uid)!;
  const wholeBytes = whole.scraper.health(q.uid)!.pageBytes;
  assert.equal(health.filtered, true);
  assert.equal(whole.scraper.health(q.uid)!.filtered, false);
  assert.ok(health.pageBytes * 5 < wholeBytes, `${health.pageBytes} vs ${wholeBytes} bytes`);
  // Idle pods: every load says the same, filtered or not (TTFT, queue time, tokens, KV capacity).
  assert.deepEqual(content(filtered.loads.at(-1)!), content(whole.loads.at(-1)!));
  assert.ok(filtered.loads.at(-1)!.kvCapacityTokens! > 0 && filtered.loads.at(-1)!.ttftCount !== undefined);
});

test('an SGLang pod whose server honours the filter is scraped filtered with the same load', async (t) => {
  const sim = await startSim({ engine: 'sglang', seed: 1, nameFilter: 'honoured' });
  const filtered = recordingScraper({ intervalMs: 25 });
  const whole = recordingScraper({ intervalMs: 25, filter: false });
  t.after(async () => {
    await Promise.all([filtered.scraper.stop(), whole.scraper.stop()]);
    await sim.close();
  });
  const p = pod('sglang-0', sim.url.slice('http://'.length));
  for (const s of [whole, filtered]) {
    s.scraper.setPods([p]);
    s.scraper.start();
  }
  await waitFor(() => filtered.loads.length >= 3 && whole.loads.length >= 3, 5000, 'three loads each');
  assert.deepEqual([...filtered.errors, ...whole.errors], []);
  assert.equal(filtered.scraper.health(p.uid)!.filtered, true);
  assert.ok(filtered.scraper.health(p.uid)!.pageBytes * 3 < whole.scraper.health(p.uid)!.pageBytes);
  assert.deepEqual(content(filtered.loads.at(-1)!), content(whole.loads.at(-1)!));
});

test('a TGI pod is never asked for a filtered page (its server ignores the query)', async (t) => {
  const seen: string[] = [];
  const sim = await startSim({ engine: 'tgi', seed: 1, onRequest: (r) => seen.push(`${r.path}?${r.query}`) });
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 25 });
  t.after(async () => {
    await scraper.stop();
    await sim.close();
  });
  scraper.setPods([pod('tgi-0', sim.url.slice('http://'.length))]);
  scraper.start();
  await waitFor(() => loads.length >= 3, 5000, 'three loads');
  assert.deepEqual(errors, []);
  assert.deepEqual(new Set(seen), new Set(['/metrics?']));
});

test('a server that ignores the filter sends the whole page, which is read as before', async (t) => {
  const server = await pageServer((_target, res) => sendPage(res, VLLM_V1));
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 25 });
  t.after(async () => {
    await scraper.stop();
    await server.close();
  });
  const p = pod('llama-0', server.address);
  scraper.setPods([p]);
  scraper.start();
  await waitFor(() => loads.length >= 3, 5000, 'three loads');
  assert.deepEqual(errors, []);
  assert.equal(server.targets[1], filteredTarget(ADAPTERS.vllm));
  assert.equal(loads.length, server.targets.length, 'no fallback: the page has every sample');
  assert.deepEqual([loads.at(-1)!.waiting, loads.at(-1)!.running, loads.at(-1)!.kvCache], [4, 9, 0.4375]);
  assert.equal(scraper.health(p.uid)!.pageBytes, Buffer.byteLength(VLLM_V1));
});

test('an empty filtered page (SGLang’s multiprocess registry) gets the whole page in the same scrape, then whole pages until filterRetryMs', async (t) => {
  const seen: string[] = [];
  const sim = await startSim({
    engine: 'sglang',
    seed: 1,
    onRequest: (r) => seen.push(r.query === '' ? 'whole' : 'filtered'),
  });
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 25, filterRetryMs: 400 });
  t.after(async () => {
    await scraper.stop();
    await sim.close();
  });
  const p = pod('sglang-0', sim.url.slice('http://'.length));
  scraper.setPods([p]);
  scraper.start();
  await waitFor(() => loads.length >= 6, 5000, 'six loads');
  assert.deepEqual(seen.slice(0, 4), ['whole', 'filtered', 'whole', 'whole']);
  assert.equal(scraper.health(p.uid)!.filtered, false);
  // The retry: one more filtered request after 400 ms, answered empty again, and whole right after.
  await waitFor(() => seen.lastIndexOf('filtered') > 1, 5000, 'the filter tried again');
  await waitFor(() => seen.length > seen.lastIndexOf('filtered') + 2, 5000, 'scrapes after it');
  assert.equal(seen[seen.lastIndexOf('filtered') + 1], 'whole');
  assert.deepEqual(errors, [], 'every scrape produced a load');
});

test('a partial filtered page (histograms dropped by a proxy) falls back, and the load keeps its TTFT', async (t) => {
  const server = await pageServer((target, res) => {
    const q = target.indexOf('?');
    if (q < 0) return sendPage(res, VLLM_V1);
    const page = restrictPage(VLLM_V1, requestedNames(target.slice(q + 1))!);
    sendPage(res, page.replace(/^vllm:[a-z_:]*_(sum|count)\{.*\n/gm, ''));
  });
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 25, filterRetryMs: 60_000 });
  t.after(async () => {
    await scraper.stop();
    await server.close();
  });
  const p = pod('llama-0', server.address);
  scraper.setPods([p]);
  scraper.start();
  await waitFor(() => loads.length >= 4, 5000, 'four loads');
  assert.deepEqual(errors, []);
  assert.deepEqual(
    server.targets.slice(0, 5).map((target) => (target.includes('?') ? 'filtered' : 'whole')),
    ['whole', 'filtered', 'whole', 'whole', 'whole'],
  );
  for (const load of loads) assert.equal(typeof load.ttftCount, 'number', 'every load has the TTFT histogram');
  assert.equal(scraper.health(p.uid)!.filtered, false);
});

test('an error status for the filtered target (a proxy’s 404) falls back to the whole page', async (t) => {
  const server = await pageServer((target, res) => {
    if (target.startsWith('/metrics/')) res.writeHead(404).end('not found');
    else sendPage(res, VLLM_V1);
  });
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 25 });
  t.after(async () => {
    await scraper.stop();
    await server.close();
  });
  scraper.setPods([pod('llama-0', server.address)]);
  scraper.start();
  await waitFor(() => loads.length >= 3, 5000, 'three loads');
  assert.deepEqual(errors, []);
  assert.deepEqual(
    server.targets.slice(0, 4).map((target) => (target.includes('?') ? 'filtered' : 'whole')),
    ['whole', 'filtered', 'whole', 'whole'],
  );
});

test('a sample gone from the page itself costs one whole scrape, and filtering goes on', async (t) => {
  let page = VLLM_V1;
  const server = await pageServer((target, res) => {
    const q = target.indexOf('?');
    sendPage(res, q < 0 ? page : restrictPage(page, requestedNames(target.slice(q + 1))!));
  });
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 25, filterRetryMs: 60_000 });
  t.after(async () => {
    await scraper.stop();
    await server.close();
  });
  const p = pod('llama-0', server.address);
  scraper.setPods([p]);
  scraper.start();
  await waitFor(() => loads.length >= 3, 5000, 'three loads');
  // The pod restarts as a version without the prefix-cache counters: gone from both pages.
  page = VLLM_V1.replace(/^.*vllm:prefix_cache_(queries|hits).*\n/gm, '');
  const from = server.targets.length;
  await waitFor(() => server.targets.length >= from + 6, 5000, 'six more scrapes');
  const after = server.targets.slice(from).map((target) => (target.includes('?') ? 'filtered' : 'whole'));
  assert.equal(after.filter((kind) => kind === 'whole').length, 1, after.join(' '));
  assert.deepEqual(errors, []);
  assert.equal(scraper.health(p.uid)!.filtered, true);
  assert.equal(loads.at(-1)!.prefixCacheQueries, undefined);
});
