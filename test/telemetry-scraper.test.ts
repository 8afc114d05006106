import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { Scraper, type ScraperOptions } from '../agent/telemetry/scraper.ts';
import type { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import type { Pod, PodLoad } from '../agent/types.ts';
import { waitFor } from './helpers/wait.ts';
import { scrapedPod } from './helpers/scrape-fixtures.ts';

interface FakeServer {
  address: string;
  requests: number;
  connections: number;
  maxConcurrent: number;
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  close(): Promise<void>;
}

async function fakeModelServer(handler: FakeServer['handler']): Promise<FakeServer> {
  let concurrent = 0;
  const server = createServer((req, res) => {
    state.requests++;
    concurrent++;
    state.maxConcurrent = Math.max(state.maxConcurrent, concurrent);
    res.on('close', () => concurrent--);
    state.handler(req, res);
  });
  server.on('connection', () => state.connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const state: FakeServer = {
    address: `127.0.0.1:${port}`,
    requests: 0,
    connections: 0,
    maxConcurrent: 0,
    handler,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  return state;
}

function vllmPage(waiting: number, running: number, ttftSum = 0, ttftCount = 0): string {
  return [
    '# HELP vllm:num_requests_waiting Number of requests waiting to be processed.',
    '# TYPE vllm:num_requests_waiting gauge',
    `vllm:num_requests_waiting{engine="0",model_name="m"} ${waiting}.0`,
    '# TYPE vllm:num_requests_running gauge',
    `vllm:num_requests_running{engine="0",model_name="m"} ${running}.0`,
    '# TYPE vllm:kv_cache_usage_perc gauge',
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5',
    '# TYPE vllm:time_to_first_token_seconds histogram',
    `vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} ${ttftSum}`,
    `vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} ${ttftCount}.0`,
    '',
  ].join('\n');
}

const serve = (body: () => string) => (_req: IncomingMessage, res: ServerResponse) => {
  res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
  res.end(body());
};

const pod = scrapedPod;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function recordingScraper(options: ScraperOptions) {
  const loads: { pod: Pod; load: PodLoad; telemetry: PodTelemetry }[] = [];
  const errors: { pod: Pod; error: string }[] = [];
  const scraper = new Scraper(
    options,
    (p, load, telemetry) => loads.push({ pod: p, load, telemetry }),
    (p, error) => errors.push({ pod: p, error }),
  );
  return { scraper, loads, errors };
}

test('scrapes a pod over one kept-alive connection, detects its engine and follows the page as it changes', async (t) => {
  let waiting = 3;
  const server = await fakeModelServer(serve(() => vllmPage(waiting, 8)));
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 25 });
  t.after(async () => {
    await scraper.stop();
    await server.close();
  });

  const p = pod('llama-0', server.address);
  scraper.setPods([p]);
  scraper.start();
  await waitFor(() => loads.length > 0, 5000, 'a first load');
  assert.equal(loads[0].load.waiting, 3);
  assert.equal(loads[0].load.running, 8);
  assert.equal(loads[0].pod.engine, 'vllm');
  assert.equal(scraper.pod(p.uid)?.engine, 'vllm');
  assert.equal(p.engine, undefined, "the caller's pod object is not mutated");

  waiting = 9;
  await waitFor(() => loads.at(-1)?.load.waiting === 9, 5000, 'the new queue length');
  await waitFor(() => server.requests >= 8, 5000, 'a few more scrapes');
  assert.equal(server.connections, 1);
  assert.deepEqual(errors, []);
  const health = scraper.health(p.uid);
  assert.equal(health?.consecutiveFailures, 0);
  assert.equal(health?.parseErrors, 0);
  assert.ok((health?.scrapes ?? 0) >= 8);
  assert.equal(scraper.isStale(p.uid), false);
});

test('reports the TTFT of the requests finished between two scrapes', async (t) => {
  let count = 10;
  let sum = 5;
  const server = await fakeModelServer(serve(() => vllmPage(0, 1, sum, count)));
  const { scraper, loads } = recordingScraper({ intervalMs: 25 });
  t.after(async () => {
    await scraper.stop();
    await server.close();
  });
  scraper.setPods([pod('llama-0', server.address, 'vllm')]);
  scraper.start();
  await waitFor(() => loads.length > 0, 5000, 'a first load');
  count = 14;
  sum = 7;
  await waitFor(() => (loads.at(-1)?.telemetry.lastDelta?.ttft?.count ?? 0) > 0, 5000, 'the new requests');
  const ttft = loads.at(-1)?.telemetry.lastDelta?.ttft;
  assert.equal(ttft?.count, 4);
  assert.equal(ttft?.mean, 0.5);
});

test('a hung pod times out, and is never scraped twice at once', async (t) => {
  const server = await fakeModelServer(() => {
    /* never answers */
  });
  const { scraper, errors } = recordingScraper({ intervalMs: 10, timeoutMs: 60 });
  t.after(async () => {
    await scraper.stop();
    await server.close();
  });
  const p = pod('stuck', server.address, 'vllm');
  scraper.setPods([p]);
  scraper.start();
  await waitFor(() => errors.length >= 3, 5000, 'three timeouts');
  assert.equal(errors[0].error, 'timed out after 60 ms');
  assert.equal(server.maxConcurrent, 1);
  assert.ok((scraper.health(p.uid)?.consecutiveFailures ?? 0) >= 3);
  assert.equal(scraper.health(p.uid)?.lastGoodAt, undefined);
  assert.equal(scraper.isStale(p.uid), true);
});

test('an HTTP error is a failed scrape, and the pod turns stale after two intervals without a good one', async (t) => {
  let healthy = true;
  const server = await fakeModelServer((req, res) => {
    if (healthy) return serve(() => vllmPage(1, 1))(req, res);
    res.writeHead(500).end('engine dead');
  });
  let clock = 1_000_000;
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 20, now: () => clock });
  t.after(async () => {
    await scraper.stop();
    await server.close();
  });
  const p = pod('llama-0', server.address);
  scraper.setPods([p]);
  scraper.start();
  await waitFor(() => loads.length > 0, 5000, 'a good scrape');
  assert.equal(loads[0].load.at, 1_000_000);

  healthy = false;
  clock = 2_000_000;
  await waitFor(() => (scraper.health(p.uid)?.consecutiveFailures ?? 0) >= 2, 5000, 'two failures');
  assert.equal(errors[0].error, 'HTTP 500');
  assert.equal(scraper.health(p.uid)?.lastError, 'HTTP 500');
  assert.equal(scraper.health(p.uid)?.lastGoodAt, 1_000_000);
  assert.equal(scraper.isStale(p.uid, 1_000_000 + 40), false);
  assert.equal(scraper.isStale(p.uid, 1_000_000 + 41), true);
  assert.equal(scraper.isStale(p.uid), true);
  assert.equal(scraper.isStale('inference/unknown', 1_000_000), true);
  assert.equal(server.connections, 1, 'error bodies are read, so the connection is reused');

  healthy = true;
  await waitFor(() => scraper.health(p.uid)?.consecutiveFailures === 0, 5000, 'recovery');
  assert.equal(scraper.isStale(p.uid), false);
});

test('a removed pod stops being scraped, and the others go on', async (t) => {
  const a = await fakeModelServer(serve(() => vllmPage(1, 1)));
  const b = await fakeModelServer(serve(() => vllmPage(2, 2)));
  const { scraper } = recordingScraper({ intervalMs: 15 });
  t.after(async () => {
    await scraper.stop();
    await a.close();
    await b.close();
  });
  const podA = pod('a', a.address);
  const podB = pod('b', b.address);
  scraper.setPods([podA, podB]);
  scraper.start();
  await waitFor(() => a.requests >= 2 && b.requests >= 2, 5000, 'both scraped');

  scraper.setPods([podA]);
  const bAtRemoval = b.requests;
  const aAtRemoval = a.requests;
  await waitFor(() => a.requests >= aAtRemoval + 5, 5000, 'a goes on');
  assert.ok(b.requests <= bAtRemoval + 1, 'at most the scrape already in flight'); // in flight requests are aborted
  assert.equal(scraper.health(podB.uid), undefined);
  assert.deepEqual(
    scraper.pods().map((p) => p.name),
    ['a'],
  );

  scraper.setPods([podA, podB]); // and it can come back
  await waitFor(() => b.requests >= bAtRemoval + 2, 5000, 'b scraped again');
});

test('stop() ends every loop', async (t) => {
  const server = await fakeModelServer(serve(() => vllmPage(1, 1)));
  const { scraper } = recordingScraper({ intervalMs: 10 });
  t.after(() => server.close());
  scraper.setPods([pod('a', server.address)]);
  scraper.start();
  await waitFor(() => server.requests >= 3, 5000, 'some scrapes');
  await scraper.stop();
  // A request written just before stop() (the tick and this test's poll can share a timer turn)
  // may still reach the server; after that, nothing.
  const after = server.requests;
  await sleep(60);
  assert.ok(server.requests <= after + 1, `${server.requests - after} requests arrived after stop()`);
  const settled = server.requests;
  await sleep(60);
  assert.equal(server.requests, settled);
  assert.equal(scraper.running, false);
});

test('decodes a gzipped page when asked for gzip', async (t) => {
  let acceptEncoding: string | undefined;
  const server = await fakeModelServer((req, res) => {
    acceptEncoding = req.headers['accept-encoding'];
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4', 'content-encoding': 'gzip' });
    res.end(gzipSync(vllmPage(6, 2)));
  });
  const { scraper, loads } = recordingScraper({ intervalMs: 25, gzip: true });
  t.after(async () => {
    await scraper.stop();
    await server.close();
  });
  scraper.setPods([pod('a', server.address)]);
  scraper.start();
  await waitFor(() => loads.length > 0, 5000, 'a load');
  assert.equal(acceptEncoding, 'gzip');
  assert.equal(loads[0].load.waiting, 6);
});

test('garbage, an oversized page and a mismatched engine are failures, not loads', async (t) => {
  const garbage = await fakeModelServer(serve(() => '\u0000\u00ff{{{ not metrics\n\u0007garbage}} 1 2 3 4\n'));
  const huge = await fakeModelServer(serve(() => vllmPage(1, 1) + `# ${'x'.repeat(20_000)}\n`));
  const vllm = await fakeModelServer(serve(() => vllmPage(1, 1)));
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 25, maxBodyBytes: 10_000 });
  t.after(async () => {
    await scraper.stop();
    await garbage.close();
    await huge.close();
    await vllm.close();
  });
  scraper.setPods([
    pod('garbage', garbage.address),
    pod('huge', huge.address),
    pod('configured-tgi', vllm.address, 'tgi'),
  ]);
  scraper.start();
  const errorOf = (name: string) => errors.find((e) => e.pod.name === name)?.error;
  await waitFor(
    () => ['garbage', 'huge', 'configured-tgi'].every((n) => errorOf(n) !== undefined),
    5000,
    'three kinds of failure',
  );
  assert.match(errorOf('garbage') ?? '', /^not a metrics page \(\d+ malformed lines, first: line 1: /);
  assert.equal(errorOf('huge'), 'page larger than 10000 bytes');
  assert.equal(errorOf('configured-tgi'), 'tgi page has no tgi_queue_size');
  assert.deepEqual(loads, []);
  assert.equal(scraper.pod('inference/garbage')?.engine, undefined);
});

test('a response head over maxHeaderBytes fails the scrape, and the next one reconnects', async (t) => {
  let bloated = true;
  const server = await fakeModelServer((_req, res) => {
    if (bloated) res.setHeader('x-padding', 'p'.repeat(2_000));
    bloated = false;
    serve(() => vllmPage(2, 3))(_req, res);
  });
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 25, maxHeaderBytes: 1_024 });
  t.after(async () => {
    await scraper.stop();
    await server.close();
  });
  scraper.setPods([pod('a', server.address)]);
  scraper.start();
  await waitFor(() => loads.length > 0, 5000, 'a load after the refused head');
  assert.match(errors[0]?.error ?? '', /Headers Overflow/);
  assert.equal(loads[0].load.waiting, 2);
  assert.equal(server.connections, 2);
});

test('an unreachable pod is a failure with the reason', async (t) => {
  const server = await fakeModelServer(serve(() => ''));
  const address = server.address;
  await server.close(); // nothing listens on this port now
  const { scraper, errors } = recordingScraper({ intervalMs: 25 });
  t.after(() => scraper.stop());
  scraper.setPods([pod('gone', address)]);
  scraper.start();
  await waitFor(() => errors.length > 0, 5000, 'a failure');
  assert.match(errors[0].error, /ECONNREFUSED/);
});

interface RealPage {
  file: string;
  engine: Pod['engine'];
  contentType: string;
  expect: { waiting: number; running: number; kv: number | null; kvAccept?: (number | null)[] };
}
const realPages = new URL('./fixtures/model-server-metrics/', import.meta.url);
const { pages: REAL_PAGES } = JSON.parse(readFileSync(new URL('expected.json', realPages), 'utf8')) as {
  pages: RealPage[];
};

test('real vLLM, TGI and SGLang pages, sent in small pieces, read as their exporters meant them', async (t) => {
  // Each page goes out in 1,000-byte writes with a pause between them, so the scraper reads it in
  // many chunks, lines cut anywhere, as a slow pod would send it.
  const servers = await Promise.all(
    REAL_PAGES.map((page) =>
      fakeModelServer((_req, res) => {
        const body = readFileSync(new URL(page.file, realPages));
        res.writeHead(200, { 'content-type': page.contentType });
        let at = 0;
        const next = () => {
          if (res.destroyed) return;
          res.write(body.subarray(at, at + 1000));
          at += 1000;
          if (at < body.length) setTimeout(next, 1);
          else res.end();
        };
        next();
      }),
    ),
  );
  const { scraper, loads, errors } = recordingScraper({ intervalMs: 50 });
  t.after(async () => {
    await scraper.stop();
    await Promise.all(servers.map((s) => s.close()));
  });
  scraper.setPods(REAL_PAGES.map((page, i) => pod(page.file, servers[i].address)));
  scraper.start();
  const loadOf = (file: string) => loads.find((l) => l.pod.name === file)?.load;
  await waitFor(() => REAL_PAGES.every((p) => loadOf(p.file) !== undefined), 10_000, 'a load from every page');
  assert.deepEqual(errors, []);
  for (const page of REAL_PAGES) {
    const load = loadOf(page.file)!;
    assert.equal(load.engine, page.engine, page.file);
    assert.equal(load.waiting, page.expect.waiting, `${page.file} waiting`);
    assert.equal(load.running, page.expect.running, `${page.file} running`);
    const kv = Number.isNaN(load.kvCache) ? null : load.kvCache;
    assert.ok((page.expect.kvAccept ?? [page.expect.kv]).includes(kv), `${page.file} kv ${kv}`);
    assert.equal(scraper.health(`inference/${page.file}`)?.parseErrors, 0, page.file);
  }
});
