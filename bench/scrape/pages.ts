// The pods the scrape bench scrapes, in their own process so the bench's CPU figure is the
// scraper's alone: one HTTP server per page on loopback, each serving a real model-server page
// from test/fixtures/model-server-metrics (captured or assembled from the engines' sources; its
// README says which) with the content type its exporter sends. Prints `pods <json>` once listening:
// [{ name, address, engine, filter }].
//   node bench/scrape/pages.ts [--filter real|all|none] vllm-v1.txt tgi.txt …
// `?name[]=…` is answered as the page's server would (shared/sim/name-filter.ts; `filter` says how):
//   real (default): TGI ignores it; a prometheus_client page with `_created` families comes from a
//     single-process registry and is restricted (vLLM: at `/metrics/`, its exact `/metrics` being the
//     instrumentator's, which ignores the query); one without (SGLang, vLLM V0: a MultiProcessCollector
//     in a plain registry) answers a filtered request with an empty page.
//   all: every prometheus_client page restricted (SGLang once its registry supports nameless collectors).
//   none: every server ignores the query.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { answerNameFilter } from '../../shared/sim/name-filter.ts';

const PAGES_DIR = new URL('../../test/fixtures/model-server-metrics/', import.meta.url).pathname;

interface PageInfo {
  file: string;
  engine: string;
  contentType: string;
}

const { pages } = JSON.parse(readFileSync(join(PAGES_DIR, 'expected.json'), 'utf8')) as { pages: PageInfo[] };
const { values, positionals } = parseArgs({
  options: { filter: { type: 'string', default: 'real' } },
  allowPositionals: true,
});
const mode = values.filter;
if (mode !== 'real' && mode !== 'all' && mode !== 'none') throw new Error(`--filter real|all|none, not ${mode}`);

type Filter = 'honoured' | 'empty' | 'ignored';
const pods: { name: string; address: string; engine: string; filter: Filter }[] = [];
for (const [i, file] of positionals.entries()) {
  const info = pages.find((p) => p.file === file);
  if (info === undefined) throw new Error(`${file} is not in ${PAGES_DIR}/expected.json`);
  const body = readFileSync(join(PAGES_DIR, file));
  const text = body.toString('utf8');
  const filter: Filter =
    info.engine === 'tgi' || mode === 'none'
      ? 'ignored'
      : mode === 'all' || /_created[{ ]/.test(text)
        ? 'honoured'
        : 'empty';
  /** Answers by query, made once each (the page server's CPU is not what is measured). */
  const answers = new Map<string, Buffer>();
  const server = createServer((req, res) => {
    const url = req.url ?? '';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const filtering =
      info.engine === 'vllm' ? path.startsWith('/metrics') && path !== '/metrics' : info.engine === 'sglang';
    if (info.engine === 'tgi' ? path !== '/metrics' : !path.startsWith('/metrics')) {
      res.writeHead(404).end();
      return;
    }
    let answer: Buffer = body;
    if (q >= 0 && filtering && filter !== 'ignored') {
      const query = url.slice(q + 1);
      answer = answers.get(query) ?? Buffer.from(answerNameFilter(text, query, filter), 'utf8');
      answers.set(query, answer);
    }
    res.writeHead(200, { 'content-type': info.contentType, 'content-length': answer.length }).end(answer);
  });
  server.keepAliveTimeout = 5_000; // uvicorn's
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  pods.push({
    name: `pod-${i}-${file}`,
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    engine: info.engine,
    filter,
  });
}
console.log(`pods ${JSON.stringify(pods)}`);
