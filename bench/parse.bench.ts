// How long one scrape's parsing costs: a full vLLM page (two engines, _created families, python_,
// process_ and http_ families), parsed the way the scraper does (only the vLLM adapter's samples)
// and, for comparison, parsed whole.
//   node bench/parse.bench.ts
import { readFileSync } from 'node:fs';
import { Bench } from 'tinybench';
import { parsePromText } from '../agent/telemetry/promtext.ts';
import { ANY_ENGINE_SELECTOR, vllmAdapter } from '../agent/telemetry/adapters.ts';

const page = readFileSync(new URL('../test/fixtures/metrics/vllm-v1-two-engines.txt', import.meta.url), 'utf8');
const lines = page.split('\n').length;

let sink = 0; // keeps the results alive so the work cannot be optimised away
const bench = new Bench({ time: 1500, warmupTime: 300 });
bench
  .add('vLLM selector + adapter (the scrape path)', () => {
    const result = vllmAdapter.toLoad(parsePromText(page, vllmAdapter.selector), 0);
    if (result.ok) sink += result.load.waiting;
  })
  .add('any-engine selector (first scrape, detection)', () => {
    sink += parsePromText(page, ANY_ENGINE_SELECTOR).lines;
  })
  .add('every sample (no selector)', () => {
    sink += parsePromText(page).lines;
  });

await bench.run();

console.log(`page: ${lines} lines, ${page.length} characters; node ${process.version}`);
for (const task of bench.tasks) {
  const result = task.result;
  if (result.state !== 'completed') {
    console.log(`${task.name}: ${result.state}`);
    continue;
  }
  const usPerOp = result.latency.mean * 1000;
  console.log(
    `${task.name}: ${Math.round(1000 / result.latency.mean).toLocaleString('en-US')} ops/s, ${usPerOp.toFixed(1)} µs/op (±${result.latency.rme.toFixed(1)}%)`,
  );
}
if (sink === -1) console.log(sink);
