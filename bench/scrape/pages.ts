// The pods the scrape bench scrapes, in their own process so the bench's CPU figure is the
// scraper's alone: one HTTP server per page on loopback, each serving a real model-server page
// from test/fixtures/model-server-metrics (captured or assembled from the engines' sources; its
// README says which) with the content type its exporter sends. Prints `pods <json>` once listening: [{ name, address, engine }].
//   node bench/scrape/pages.ts vllm-v1.txt tgi.txt …
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

const PAGES_DIR = new URL('../../test/fixtures/model-server-metrics/', import.meta.url).pathname;

interface PageInfo {
  file: string;
  engine: string;
  contentType: string;
}

const { pages } = JSON.parse(readFileSync(join(PAGES_DIR, 'expected.json'), 'utf8')) as { pages: PageInfo[] };
const pods: { name: string; address: string; engine: string }[] = [];
for (const [i, file] of process.argv.slice(2).entries()) {
  const info = pages.find((p) => p.file === file);
  if (info === undefined) throw new Error(`${file} is not in ${PAGES_DIR}/expected.json`);
  const body = readFileSync(join(PAGES_DIR, file));
  const server = createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': info.contentType, 'content-length': body.length }).end(body);
  });
  server.keepAliveTimeout = 5_000; // uvicorn's
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  pods.push({
    name: `pod-${i}-${file}`,
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    engine: info.engine,
  });
}
console.log(`pods ${JSON.stringify(pods)}`);
