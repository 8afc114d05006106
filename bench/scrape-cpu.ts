// `npm run bench:scrape`: CPU per scrape of the production scraper, against real model-server
// pages (vLLM, TGI, SGLang; bench/scrape/pages.ts serves them from another process, so the CPU
// counted here is the scraper's: HTTP, parsing, adapting, plausibility, telemetry windows, GC).
// `--before DIR` runs another tree's scraper side by side in the same run (rounds alternate
// before/now so load drift hits both), e.g. the tree before streaming parse:
//   git archive f9e7199 agent shared | tar -x -C /tmp/kinference-before
//   ln -s "$PWD/node_modules" /tmp/kinference-before/node_modules
//   npm run bench:scrape -- --before /tmp/kinference-before
// Two more rows, `HTTP only`, are the floor under both: the same requests on per-pod connections,
// every body dropped unread (no parse, no load): what the HTTP exchange alone costs, with undici
// (what scrapes used before) and with the scraper's own connection (scrape-connection.ts).
// A third floor row asks the scrape connection for the filtered pages the scraper reads in steady
// state (`?name[]=…` where the page's server honours it, else the whole page).
// The pages answer `?name[]=…` as their servers would (bench/scrape/pages.ts): --filter real
// (default: vLLM V1 pages restricted, SGLang's and vLLM V0's multiprocess registries empty, so those
// pods fall back to whole pages; TGI ignores it), all (every prometheus_client page restricted), none.
// Flags: --interval MS (100), --seconds S per round (4), --rounds N (3), --pages a.txt,b.txt (8 pods),
// --filter real|all|none, --floors no (only the scrapers: more rounds in the same time), --warmup S
// (3: each variant first scrapes every 10 ms for S seconds, uncounted, so that its code is compiled
// as it is after minutes at 100 ms: V8 tiers a function up by how often it ran, and a per-scrape
// function called 80 times a second is still being optimised 60 s in; 0 for the cold figures).
// Prints each variant's median over rounds (and every round), the bytes of a page it read (mean
// over pods) and how many pods' last pages were filtered, and now/before as the median of the
// ratios taken within each round.
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { loadavg as osLoadavg } from 'node:os';
import { Client } from 'undici';
import { ADAPTERS, filteredTarget } from '../agent/telemetry/adapters.ts';
import { ScrapeConnection } from '../agent/telemetry/scrape-connection.ts';
import { Scraper } from '../agent/telemetry/scraper.ts';
import type { Pod } from '../agent/types.ts';

const { values } = parseArgs({
  options: {
    before: { type: 'string' },
    interval: { type: 'string', default: '100' },
    seconds: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '3' },
    filter: { type: 'string', default: 'real' },
    floors: { type: 'string', default: 'yes' },
    warmup: { type: 'string', default: '3' },
    pages: {
      type: 'string',
      default:
        'vllm-v1.txt,vllm-v1-dp2.txt,vllm-v1-lora.txt,vllm-v1-openmetrics.txt,vllm-v0-busy.txt,tgi.txt,sglang.txt,sglang-tp2.txt',
    },
  },
});
const intervalMs = Number(values.interval);
const roundMs = Number(values.seconds) * 1000;
const rounds = Number(values.rounds);
const files = values.pages.split(',');

type ScraperClass = typeof Scraper;
const variants: { name: string; Scraper: ScraperClass }[] = [];
if (values.before !== undefined) {
  const module = (await import(resolve(values.before, 'agent/telemetry/scraper.ts'))) as { Scraper: ScraperClass };
  variants.push({ name: `before (${values.before})`, Scraper: module.Scraper });
}
variants.push({ name: 'now', Scraper });
/** This tree with filtered scrapes off: what the filter alone changes. */
class WholePages extends Scraper {
  constructor(...[options, onLoad, onError]: ConstructorParameters<typeof Scraper>) {
    super({ ...options, filter: false }, onLoad, onError);
  }
}
variants.push({ name: 'now, whole pages (scrapeFilter: false)', Scraper: WholePages });

/** The floor: what `Scraper` does minus reading pages (one tick, one kept-alive connection per pod). */
class HttpOnly {
  readonly #clients: Client[] = [];
  #ticker: NodeJS.Timeout | undefined;
  readonly #onAnswer: () => void;
  readonly #intervalMs: number;
  constructor(options: { intervalMs: number }, onAnswer: () => void) {
    this.#intervalMs = options.intervalMs;
    this.#onAnswer = onAnswer;
  }
  setPods(list: readonly Pod[]): void {
    for (const pod of list) this.#clients.push(new Client(`http://${pod.address}`, { keepAliveTimeout: 4_000 }));
  }
  start(): void {
    const request = { path: '/metrics', method: 'GET' as const, headers: { accept: 'text/plain' } };
    const handler = {
      onRequestStart: () => {},
      onResponseStart: () => {},
      onResponseData: () => {},
      onResponseEnd: () => this.#onAnswer(),
      onResponseError: (_c: unknown, e: Error) => console.error(e.message),
    };
    const tick = () => {
      for (const client of this.#clients) client.dispatch(request, handler);
    };
    tick();
    this.#ticker = setInterval(tick, this.#intervalMs);
  }
  async stop(): Promise<void> {
    clearInterval(this.#ticker);
    await Promise.all(this.#clients.map((c) => c.destroy()));
  }
}
const floors = values.floors !== 'no';
if (floors) variants.push({ name: 'HTTP only, undici (floor)', Scraper: HttpOnly as unknown as ScraperClass });

/** The bench pods as pages.ts lists them. */
interface ListedPod {
  name: string;
  address: string;
  engine: 'vllm' | 'tgi' | 'sglang';
  filter: 'honoured' | 'empty' | 'ignored';
}
let listed: ListedPod[] = [];

/**
 * The same floor on the scraper's connections (scrape-connection.ts, an undici Client with dispatch
 * callbacks) against plain undici requests. `filtered`: each pod asked for what the scraper reads in steady state (the filtered page
 * where its server honours the filter).
 */
class HttpOnlyScrapeConnection {
  static filtered = false;
  readonly #connections: { connection: ScrapeConnection; request: string | undefined }[] = [];
  readonly #filtered = (this.constructor as typeof HttpOnlyScrapeConnection).filtered;
  bytes = 0;
  #ticker: NodeJS.Timeout | undefined;
  readonly #onAnswer: () => void;
  readonly #intervalMs: number;
  constructor(options: { intervalMs: number }, onAnswer: () => void) {
    this.#intervalMs = options.intervalMs;
    this.#onAnswer = onAnswer;
  }
  setPods(list: readonly Pod[]): void {
    for (const pod of list) {
      const connection = new ScrapeConnection({
        address: pod.address,
        path: '/metrics',
        headers: { accept: 'text/plain' },
      });
      const page = listed.find((p) => p.address === pod.address);
      const target = this.#filtered && page?.filter === 'honoured' ? filteredTarget(ADAPTERS[page.engine]) : undefined;
      this.#connections.push({ connection, request: target === undefined ? undefined : connection.request(target) });
    }
  }
  start(): void {
    // One sink per connection; like the scraper, a pod whose last answer hasn't come is skipped.
    const pods = this.#connections.map(({ connection, request }) => {
      const pod = {
        connection,
        request,
        busy: false,
        head: () => {},
        data: (chunk: Buffer) => {
          this.bytes += chunk.length;
        },
        end: () => {
          pod.busy = false;
          this.#onAnswer();
        },
        error: (message: string) => {
          pod.busy = false;
          console.error(message);
        },
      };
      return pod;
    });
    const tick = () => {
      for (const pod of pods) {
        if (pod.busy) continue;
        pod.busy = true;
        if (pod.request === undefined) pod.connection.get(pod);
        else pod.connection.get(pod, pod.request);
      }
    };
    tick();
    this.#ticker = setInterval(tick, this.#intervalMs);
  }
  async stop(): Promise<void> {
    clearInterval(this.#ticker);
    await Promise.all(this.#connections.map(({ connection }) => connection.close()));
  }
}
if (floors)
  variants.push({
    name: 'HTTP only, scrape connection (floor)',
    Scraper: HttpOnlyScrapeConnection as unknown as ScraperClass,
  });
class HttpOnlyFiltered extends HttpOnlyScrapeConnection {
  static override filtered = true;
}
if (floors)
  variants.push({
    name: 'HTTP only, scrape connection, filtered where honoured (floor)',
    Scraper: HttpOnlyFiltered as unknown as ScraperClass,
  });

const server = spawn(
  process.execPath,
  [new URL('./scrape/pages.ts', import.meta.url).pathname, '--filter', values.filter, ...files],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
process.on('exit', () => server.kill()); // also when the bench fails
listed = await new Promise<ListedPod[]>((done, fail) => {
  let output = '';
  server.stdout.on('data', (d: Buffer) => {
    output += d;
    const match = /^pods (.*)$/m.exec(output);
    if (match) done(JSON.parse(match[1]));
  });
  server.once('exit', (code) => fail(new Error(`page server exited ${code}`)));
});
const pods: Pod[] = listed.map((p) => ({
  uid: `bench/${p.name}`,
  name: p.name,
  namespace: 'bench',
  node: 'here',
  address: p.address,
  models: ['m'],
}));

const loadavg = (): string => osLoadavg()[0].toFixed(1);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One round: a fresh scraper of every pod, warmed up, then CPU and scrapes counted for `roundMs`. */
async function round(S: ScraperClass): Promise<{
  scrapes: number;
  errors: number;
  cpuUs: number;
  systemUs: number;
  seconds: number;
  /** Mean bytes of a page read, and pods whose last page was filtered (undefined: not known by that scraper). */
  pageBytes: number | undefined;
  filtered: number | undefined;
}> {
  let scrapes = 0;
  let errors = 0;
  let lastError = '';
  const scraper = new S(
    { intervalMs },
    () => scrapes++,
    (_pod, error) => {
      errors++;
      lastError = error;
    },
  );
  scraper.setPods(pods);
  scraper.start();
  await sleep(1000); // connections open, engines detected, code warm
  scrapes = 0;
  errors = 0;
  if (scraper instanceof HttpOnlyScrapeConnection) scraper.bytes = 0;
  const cpu = process.cpuUsage();
  const started = performance.now();
  await sleep(roundMs);
  const used = process.cpuUsage(cpu);
  const seconds = (performance.now() - started) / 1000;
  const counted = {
    scrapes,
    errors,
    cpuUs: used.user + used.system,
    systemUs: used.system,
    seconds,
    ...pagesRead(scraper, scrapes),
  };
  await scraper.stop();
  if (errors > 0) console.error(`${errors} failed scrapes, last: ${lastError}`);
  return counted;
}

/** What the variant can say of the pages it read: the scraper's health (this tree's), or the floors' byte counts. */
function pagesRead(scraper: unknown, scrapes: number): { pageBytes: number | undefined; filtered: number | undefined } {
  if (scraper instanceof HttpOnlyScrapeConnection) return { pageBytes: scraper.bytes / scrapes, filtered: undefined };
  const health = (scraper as { health?: (uid: string) => { pageBytes?: number; filtered?: boolean } | undefined })
    .health;
  if (health === undefined) return { pageBytes: undefined, filtered: undefined };
  const each = pods.map((p) => health.call(scraper, p.uid));
  if (each.some((h) => h?.pageBytes === undefined)) return { pageBytes: undefined, filtered: undefined };
  return {
    pageBytes: each.reduce((n, h) => n + h!.pageBytes!, 0) / each.length,
    filtered: each.filter((h) => h!.filtered === true).length,
  };
}

/** Scrapes every 10 ms for `seconds`, nothing counted: the variant's code optimised before its rounds. */
async function warmUp(S: ScraperClass, seconds: number): Promise<void> {
  if (!(seconds > 0)) return;
  const scraper = new S(
    { intervalMs: 10 },
    () => {},
    () => {},
  );
  scraper.setPods(pods);
  scraper.start();
  await sleep(seconds * 1000);
  await scraper.stop();
}

const warmupSeconds = Number(values.warmup);
for (const v of variants) await warmUp(v.Scraper, warmupSeconds);
const started = loadavg();
/** Each variant's rounds, in order. */
const results = new Map<string, Awaited<ReturnType<typeof round>>[]>(variants.map((v) => [v.name, []]));
for (let r = 0; r < rounds; r++) {
  for (const v of variants) {
    results.get(v.name)!.push(await round(v.Scraper));
    await sleep(200);
  }
}
server.kill();

const median = (xs: number[]): number => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const perScrapeMs = (r: { cpuUs: number; scrapes: number }) => r.cpuUs / 1000 / r.scrapes;

console.log(
  `${pods.length} pods (${listed.map((p) => `${p.name.replace(/^pod-\d+-/, '')} ${p.filter}`).join(', ')}; --filter ${values.filter}), every ${intervalMs} ms, ${rounds} × ${roundMs / 1000} s per scraper after ${warmupSeconds} s of warm-up at 10 ms; node ${process.version}; load average ${started} → ${loadavg()}`,
);
const rows = [...results].map(([name, list]) => {
  const scrapes = list.reduce((n, r) => n + r.scrapes, 0);
  const seconds = list.reduce((n, r) => n + r.seconds, 0);
  const cpuUs = list.reduce((n, r) => n + r.cpuUs, 0);
  return {
    scraper: name,
    scrapes,
    failed: list.reduce((n, r) => n + r.errors, 0),
    'CPU ms/scrape (median)': median(list.map(perScrapeMs)).toFixed(3),
    'of which kernel': median(list.map((r) => r.systemUs / 1000 / r.scrapes)).toFixed(3),
    'KB per page': list[0].pageBytes === undefined ? '–' : (median(list.map((r) => r.pageBytes!)) / 1024).toFixed(1),
    'pods filtered': list[0].filtered === undefined ? '–' : `${list.at(-1)!.filtered}/${pods.length}`,
    'each round': list.map((r) => perScrapeMs(r).toFixed(3)).join(' '),
    [`% of a core (${pods.length} pods @ ${intervalMs} ms)`]: (((cpuUs / 1e6) * 100) / seconds).toFixed(2),
  };
});
console.table(rows);
if (values.before !== undefined) {
  // Ratios within each round (the two ran seconds apart), then their median.
  const [before, now] = [...results.values()];
  const ratios = now.map((r, i) => perScrapeMs(r) / perScrapeMs(before[i]));
  console.log(
    `now / before CPU per scrape: median ${median(ratios).toFixed(2)}× (rounds: ${ratios.map((x) => x.toFixed(2)).join(' ')})`,
  );
}
{
  // Within this tree: filtered scrapes against whole ones, round by round.
  const now = results.get('now')!;
  const whole = results.get('now, whole pages (scrapeFilter: false)')!;
  const ratios = now.map((r, i) => perScrapeMs(r) / perScrapeMs(whole[i]));
  console.log(
    `now / now with whole pages: median ${median(ratios).toFixed(2)}× (rounds: ${ratios.map((x) => x.toFixed(2)).join(' ')})`,
  );
}
