// Runs only the production scraper against the bench pages (for `node --cpu-prof`), or counts what
// a fixed number of its scrapes cost, in ways the machine's load doesn't change:
//   node --cpu-prof --cpu-prof-dir /tmp/prof bench/scrape/run-scraper.ts --seconds 20
//   mkfifo /tmp/ctl /tmp/ack; perf stat -e instructions:u -D -1 --control fifo:/tmp/ctl,/tmp/ack -- \
//     node bench/scrape/run-scraper.ts --scrapes 2000 --perf-control /tmp/ctl,/tmp/ack
//   valgrind --tool=callgrind --instr-atstart=no node bench/scrape/run-scraper.ts --scrapes 400 \
//     --interval 400 --callgrind      (where no hardware counters: instructions, deterministic)
//   node bench/scrape/run-scraper.ts --scrapes 2000 --alloc      (bytes allocated per scrape, by site)
//   node bench/scrape/run-scraper.ts --scrapes 2000 --profile /tmp/scrapes.cpuprofile (those scrapes only)
// `--scrapes N`: after the warm-up (1 s, or `--warmup N` scrapes), the counters run over exactly N scrapes that produced a load
// (perf is enabled and disabled through its control fifo, so start-up and the page server, another
// process, are not counted). `--before DIR` runs that tree's scraper instead; `--floor` runs the
// HTTP exchange alone (the scrape connection, every body dropped unread).
import { spawn } from 'node:child_process';
import { openSync, readSync, writeFileSync, writeSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Scraper } from '../../agent/telemetry/scraper.ts';
import { ScrapeConnection } from '../../agent/telemetry/scrape-connection.ts';
import type { Pod } from '../../agent/types.ts';
import { allocationBySite } from '../heap-sites.ts';

const { values } = parseArgs({
  options: {
    interval: { type: 'string', default: '100' },
    timeout: { type: 'string', default: '1000' },
    seconds: { type: 'string', default: '10' },
    scrapes: { type: 'string' },
    warmup: { type: 'string' },
    before: { type: 'string' },
    floor: { type: 'boolean', default: false },
    filter: { type: 'string', default: 'real' },
    'perf-control': { type: 'string' },
    alloc: { type: 'boolean', default: false },
    callgrind: { type: 'boolean', default: false },
    profile: { type: 'string' },
    top: { type: 'string', default: '15' },
    pages: {
      type: 'string',
      default:
        'vllm-v1.txt,vllm-v1-dp2.txt,vllm-v1-lora.txt,vllm-v1-openmetrics.txt,vllm-v0-busy.txt,tgi.txt,sglang.txt,sglang-tp2.txt',
    },
  },
});
const server = spawn(
  process.execPath,
  [new URL('./pages.ts', import.meta.url).pathname, '--filter', values.filter, ...values.pages.split(',')],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
process.on('exit', () => server.kill());
const listed = await new Promise<{ name: string; address: string }[]>((done) => {
  let output = '';
  server.stdout.on('data', (d: Buffer) => {
    output += d;
    const match = /^pods (.*)$/m.exec(output);
    if (match) done(JSON.parse(match[1]));
  });
});
const pods: Pod[] = listed.map((p) => ({
  uid: p.name,
  name: p.name,
  namespace: 'bench',
  node: 'here',
  address: p.address,
  models: ['m'],
}));

interface Runner {
  setPods(pods: readonly Pod[]): void;
  start(): void;
  stop(): Promise<void>;
}

/** The HTTP exchange alone, one tick for all pods like the scraper: the floor under it. */
class HttpOnly implements Runner {
  readonly #connections: ScrapeConnection[] = [];
  #ticker: NodeJS.Timeout | undefined;
  readonly #onAnswer: () => void;
  constructor(onAnswer: () => void) {
    this.#onAnswer = onAnswer;
  }
  setPods(list: readonly Pod[]): void {
    for (const pod of list)
      this.#connections.push(new ScrapeConnection({ address: pod.address, path: '/metrics', headers: {} }));
  }
  start(): void {
    const sinks = this.#connections.map((connection) => {
      const sink = {
        connection,
        busy: false,
        head: () => {},
        data: () => {},
        end: () => {
          sink.busy = false;
          this.#onAnswer();
        },
        error: (message: string) => {
          sink.busy = false;
          console.error(message);
        },
      };
      return sink;
    });
    const tick = () => {
      for (const sink of sinks) {
        if (sink.busy) continue;
        sink.busy = true;
        sink.connection.get(sink);
      }
    };
    tick();
    this.#ticker = setInterval(tick, Number(values.interval));
  }
  async stop(): Promise<void> {
    clearInterval(this.#ticker);
    await Promise.all(this.#connections.map((c) => c.close()));
  }
}

const S: typeof Scraper =
  values.before === undefined
    ? Scraper
    : ((await import(resolve(values.before, 'agent/telemetry/scraper.ts'))) as { Scraper: typeof Scraper }).Scraper;

const target = values.scrapes === undefined ? undefined : Number(values.scrapes);
let scrapes = 0;
let errors = 0;
let lastError = '';
let counting = false;
let reached: () => void = () => {};
const counted = new Promise<void>((r) => (reached = r));
const perf = values['perf-control']?.split(',');
const perfControl = perf && { ctl: openSync(perf[0], 'w'), ack: openSync(perf[1], 'r') };
/**
 * Counters on or off: perf stat's control fifo (`enable` / `disable`, each acknowledged), or
 * callgrind's instrumentation (`callgrind_control -i on|off`, when run under valgrind's callgrind
 * with `--instr-atstart=no`). Resolves once the counters have switched.
 */
async function counters(on: boolean): Promise<void> {
  if (perfControl !== undefined) {
    writeSync(perfControl.ctl, on ? 'enable\n' : 'disable\n');
    readSync(perfControl.ack, Buffer.alloc(5));
  }
  if (values.callgrind) {
    const control = spawn('callgrind_control', ['-i', on ? 'on' : 'off', String(process.pid)], { stdio: 'ignore' });
    await new Promise((r) => control.once('exit', r));
  }
}
const onScrape = () => {
  scrapes++;
  if (counting && scrapes === target) {
    counting = false;
    void counters(false).then(reached);
  }
};
const scraper: Runner = values.floor
  ? new HttpOnly(onScrape)
  : new S({ intervalMs: Number(values.interval), timeoutMs: Number(values.timeout) }, onScrape, (_pod, error) => {
      errors++;
      lastError = error;
    });
scraper.setPods(pods);
scraper.start();
if (values.warmup === undefined) await new Promise((r) => setTimeout(r, 1000));
else {
  const warm = Number(values.warmup);
  while (scrapes < warm) await new Promise((r) => setTimeout(r, 50));
}

const session = new Session();
if (values.alloc || values.profile !== undefined) session.connect();
if (values.profile !== undefined) {
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 50 });
  await session.post('Profiler.start');
}
if (values.alloc) {
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 128,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
}
scrapes = 0;
errors = 0;
console.log('counting'); // a mark in --trace-opt / --trace-gc output
const cpu = process.cpuUsage();
if (target !== undefined) {
  await counters(true);
  scrapes = 0;
  errors = 0;
  counting = true;
  await counted;
} else await new Promise((r) => setTimeout(r, Number(values.seconds) * 1000));
const used = process.cpuUsage(cpu);
const n = scrapes;
if (errors > 0) console.error(`${errors} failed scrapes, last: ${lastError}`);
console.log(
  `${n} scrapes, ${errors} errors, ${((used.user + used.system) / 1000 / n).toFixed(3)} ms CPU/scrape (${values.floor ? 'floor' : (values.before ?? 'now')})`,
);

if (values.profile !== undefined) {
  const { profile } = await session.post('Profiler.stop');
  writeFileSync(values.profile, JSON.stringify(profile));
}
if (values.alloc) {
  const { total, sites } = await allocationBySite(session);
  console.log(`${(total / n).toFixed(0)} bytes allocated per scrape (sampled every 128 B)`);
  for (const [site, bytes] of sites.slice(0, Number(values.top)))
    console.log(`  ${(bytes / n).toFixed(0).padStart(7)} B  ${site}`);
}
if (values.alloc || values.profile !== undefined) session.disconnect();
await scraper.stop();
server.kill();
