// The page reader and adapter alone, per bench page, counted deterministically: each page as the
// scrape bench's server answers it (vLLM V1 filtered, the rest whole), fed to `PromTextReader` in
// 64 KB chunks as the socket delivers it, then `toLoad`. Under callgrind (instrumentation off at
// start) only the counted reads are measured, page by page:
//   valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/read-pages.callgrind \
//     node bench/scrape/read-pages.ts --callgrind
// prints each page's instructions per read (from the dump `callgrind_control -d` writes after it). Without
// valgrind: ns per read (for a quick look; load makes that figure move).
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { ADAPTERS, filteredTarget } from '../../agent/telemetry/adapters.ts';
import { PromTextReader } from '../../agent/telemetry/promtext.ts';
import type { Engine } from '../../agent/types.ts';
import { answerNameFilter } from '../../shared/sim/name-filter.ts';

const { values } = parseArgs({
  options: {
    warmup: { type: 'string', default: '3000' },
    reads: { type: 'string', default: '300' },
    callgrind: { type: 'boolean', default: false },
    /** valgrind's `--callgrind-out-file` (no %p), where the dumps are read back. */
    'callgrind-out': { type: 'string', default: '/tmp/read-pages.callgrind' },
    pages: {
      type: 'string',
      default:
        'vllm-v1.txt,vllm-v1-dp2.txt,vllm-v1-lora.txt,vllm-v1-openmetrics.txt,vllm-v0-busy.txt,tgi.txt,sglang.txt,sglang-tp2.txt',
    },
  },
});
const DIR = new URL('../../test/fixtures/model-server-metrics/', import.meta.url).pathname;
const { pages: infos } = JSON.parse(readFileSync(join(DIR, 'expected.json'), 'utf8')) as {
  pages: { file: string; engine: Engine }[];
};
const CHUNK = 65_536;

const pages = values.pages.split(',').map((file) => {
  const engine = infos.find((p) => p.file === file)!.engine;
  const text = readFileSync(join(DIR, file), 'utf8');
  const adapter = ADAPTERS[engine];
  const target = filteredTarget(adapter);
  // As pages.ts serves it with `--filter real`: a single-process registry (with `_created`) filters.
  const body =
    target !== undefined && engine === 'vllm' && /_created[{ ]/.test(text)
      ? answerNameFilter(text, target.slice(target.indexOf('?') + 1), 'honoured')
      : text;
  const bytes = Buffer.from(body, 'utf8');
  // One socket-sized buffer, reused: the chunks are views of it, as on the scrape connection.
  const buffer = Buffer.allocUnsafe(Math.min(CHUNK, bytes.length));
  return { file, adapter, bytes, buffer };
});

let sink = 0;
function read(page: (typeof pages)[number]): void {
  const reader = new PromTextReader(page.adapter.selector);
  for (let at = 0; at < page.bytes.length; at += CHUNK) {
    const n = page.bytes.copy(page.buffer, 0, at, at + CHUNK);
    reader.write(page.buffer.subarray(0, n));
  }
  const result = page.adapter.toLoad(reader.end(), 0);
  if (!result.ok) throw new Error(`${page.file}: ${result.error}`);
  sink += result.load.waiting;
}

for (let k = 0; k < Number(values.warmup); k++) for (const page of pages) read(page);
const reads = Number(values.reads);
/** `callgrind_control` (asynchronous: valgrind takes the command while this process runs). */
async function control(...args: string[]): Promise<void> {
  const child = spawn('callgrind_control', [...args, String(process.pid)], { stdio: 'ignore' });
  await new Promise((r) => child.once('exit', r));
}
/** The instructions callgrind counted since its last dump: dumps now and reads the dump's total. */
async function dumped(): Promise<number> {
  await control('-d');
  const dir = dirname(values['callgrind-out']!);
  const files = readdirSync(dir)
    .filter((f) => f.startsWith(`${basename(values['callgrind-out']!)}.`))
    .map((f) => join(dir, f))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  const total = /^totals: (\d+)/m.exec(readFileSync(files[0], 'utf8'));
  return total === null ? 0 : Number(total[1]);
}
/** What switching the counters on and off costs (the control processes' spawns), with no read between. */
let overhead = 0;
if (values.callgrind) {
  await dumped();
  await control('-i', 'on');
  await control('-i', 'off');
  overhead = await dumped();
}
let all = 0;
for (const page of pages) {
  if (values.callgrind) {
    await dumped(); // what ran before is not this page's
    await control('-i', 'on');
  }
  const start = process.hrtime.bigint();
  for (let k = 0; k < reads; k++) read(page);
  const ns = Number(process.hrtime.bigint() - start) / reads;
  let figure = `${(ns / 1000).toFixed(1)} µs/read`;
  if (values.callgrind) {
    await control('-i', 'off');
    const per = ((await dumped()) - overhead) / reads;
    all += per;
    figure = `${(per / 1000).toFixed(1)} K instructions/read`;
  }
  console.log(`${page.file.padEnd(26)} ${String(page.bytes.length).padStart(7)} B  ${figure}`);
}
if (values.callgrind)
  console.log(
    `all pages: ${(all / 1000).toFixed(1)} K instructions, ${(all / pages.length / 1000).toFixed(1)} K a page`,
  );
if (sink === -1) console.log(sink);
