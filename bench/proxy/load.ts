// The load generator for `bench:proxy`, in its own process. Two modes:
//   rate: open loop, a request every 1/R s for D s; latency from the *scheduled* send time (so a
//         stalled target is charged for the requests it delayed), to the full answer (non-streamed)
//         or to the first byte of the body (streamed).
//   max:  closed loop, C requests always in flight for D s; completed requests per second.
// Prints one JSON line with the result.
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

const { values } = parseArgs({
  options: {
    url: { type: 'string' },
    mode: { type: 'string', default: 'rate' },
    rate: { type: 'string', default: '200' },
    duration: { type: 'string', default: '10' },
    connections: { type: 'string', default: '64' },
    stream: { type: 'boolean', default: false },
    model: { type: 'string', default: 'bench-model' },
  },
});
const url = new URL(values.url!);
const durationMs = Number(values.duration) * 1000;
const connections = Number(values.connections);
const pool = new Pool(url.origin, { connections, keepAliveTimeout: 60_000 });
const body = JSON.stringify({
  model: values.model,
  messages: [{ role: 'user', content: 'Say ok.' }],
  max_tokens: 2,
  stream: values.stream,
});
const headers = { 'content-type': 'application/json' };

/** One request; resolves with ms from `since` to the first body byte (streamed) or the end. */
async function once(since: number): Promise<number | undefined> {
  try {
    const res = await pool.request({ path: url.pathname, method: 'POST', headers, body });
    let firstByte: number | undefined;
    for await (const piece of res.body) {
      if (firstByte === undefined && (piece as Buffer).length > 0) firstByte = performance.now();
    }
    if (res.statusCode !== 200) return undefined;
    return (values.stream ? (firstByte ?? performance.now()) : performance.now()) - since;
  } catch {
    return undefined;
  }
}

function quantile(sorted: number[], q: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : NaN;
}

async function openLoop(ratePerS: number) {
  const latencies: number[] = [];
  let errors = 0;
  const pending: Promise<void>[] = [];
  const start = performance.now();
  const total = Math.floor((ratePerS * durationMs) / 1000);
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / ratePerS;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(
      once(due).then((ms) => {
        if (ms === undefined) errors++;
        else latencies.push(ms);
      }),
    );
  }
  await Promise.all(pending);
  latencies.sort((a, b) => a - b);
  return {
    mode: 'rate',
    rate: ratePerS,
    count: latencies.length,
    errors,
    p50: quantile(latencies, 0.5),
    p99: quantile(latencies, 0.99),
  };
}

async function closedLoop() {
  let completed = 0;
  let errors = 0;
  const end = performance.now() + durationMs;
  const worker = async () => {
    while (performance.now() < end) {
      if ((await once(performance.now())) === undefined) errors++;
      else completed++;
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: connections }, worker));
  return { mode: 'max', connections, completed, errors, perS: completed / ((performance.now() - start) / 1000) };
}

const result = values.mode === 'max' ? await closedLoop() : await openLoop(Number(values.rate));
await pool.close();
process.stdout.write(`${JSON.stringify(result)}\n`);
