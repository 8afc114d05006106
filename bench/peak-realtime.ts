// `node bench/peak-realtime.ts`: the peak in real time, on `kinference sim` pods of a shape no other
// bench uses (3 SGLang-format pods, 12 sequences, prefill at a full batch 2.5× slower, speeds 1.4,
// 1 and 0.7), through a real agent on loopback. Bounded: about three minutes.
//
// First the pool's SLO capacity is measured as a user would: must-stay traffic only (it cannot
// overflow) at rising rates, 12 s each; the capacity is the highest rate whose requests met the
// SLO 98% of the time. Then a fresh agent goes straight into a peak of 2× that capacity with a
// quarter of the requests must-stay, for 60 s. Per 20 s window it prints the leavable requests'
// attainment, their local share, and that share against what the capacity leaves for them:
// (capacity − must-stay rate) / leavable rate.
//   --peak S   seconds of peak (default 60)     --step S   seconds per capacity step (default 12)
//   --detail   also the first window by 2 s: where the fresh agent's misses fall
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { startAgent, type RunningAgent } from '../agent/agent.ts';
import { settingsFromObject } from '../agent/config/load.ts';
import { mulberry32 } from '../shared/sim/random.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';

const { values } = parseArgs({
  options: {
    peak: { type: 'string', default: '60' },
    step: { type: 'string', default: '12' },
    detail: { type: 'boolean', default: false },
  },
});
const PEAK_MS = Number(values.peak) * 1000;
const STEP_MS = Number(values.step) * 1000;
const MODEL = 'llama-3-8b';
const SPEEDS = [1.4, 1, 0.7];
const MAX_SEQS = 12;
const SLO_MS = 900;
const STAY_SHARE = 0.25;
const WINDOW_MS = 20_000;
/** Capacity steps, in requests per second for the whole pool. */
const STEPS = [4, 6, 8, 10, 12, 14, 16];
const PROVIDER_KEY_ENV = 'KINFERENCE_PEAK_PROVIDER_KEY';

interface Outcome {
  at: number;
  stay: boolean;
  route: string;
  ttftMs: number;
}

function prompt(rand: () => number): string {
  const words = ['latency', 'cluster', 'tokens', 'gpu', 'batch', 'queue', 'policy', 'route', 'model', 'answer'];
  const n = 20 + Math.floor(rand() * 300);
  return Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(' ');
}

async function sendOne(apiUrl: string, rand: () => number, stay: boolean, t0: number): Promise<Outcome> {
  const started = performance.now();
  const body = JSON.stringify({
    model: MODEL,
    stream: true,
    max_tokens: 16 + Math.floor(rand() * 48),
    messages: [{ role: 'user', content: prompt(rand) }],
  });
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (stay) headers['x-kinference-tags'] = 'pii';
  const outcome: Outcome = { at: started - t0, stay, route: 'failed', ttftMs: Infinity };
  try {
    const response = await request(`${apiUrl}/v1/chat/completions`, { method: 'POST', headers, body });
    outcome.route = String(response.headers['x-kinference-route'] ?? `status-${response.statusCode}`);
    for await (const chunk of response.body) {
      if (response.statusCode === 200 && chunk.length > 0 && outcome.ttftMs === Infinity)
        outcome.ttftMs = performance.now() - started;
    }
  } catch {
    // counted as failed: no TTFT
  }
  return outcome;
}

/** Poisson arrivals at `ratePerS` for `ms`; resolves when every request has answered. */
async function drive(apiUrl: string, ratePerS: number, ms: number, stayShare: number, seed: number) {
  const rand = mulberry32(seed);
  const sent: Promise<Outcome>[] = [];
  const t0 = performance.now();
  let next = t0;
  while (performance.now() - t0 < ms) {
    while (next <= performance.now()) {
      sent.push(sendOne(apiUrl, rand, rand() < stayShare, t0));
      next += (-Math.log(1 - rand()) / ratePerS) * 1000;
    }
    await new Promise((resolve) => setTimeout(resolve, Math.max(1, Math.min(20, next - performance.now()))));
  }
  return Promise.all(sent);
}

async function agentFor(pods: SimServer[], provider: SimServer): Promise<RunningAgent> {
  const settings = settingsFromObject(
    {
      node: 'peak-node',
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
      scrapeInterval: '100ms',
      pods: pods.map((sim, i) => ({
        name: `gpu-${i}`,
        namespace: 'inference',
        address: new URL(sim.url).host,
        engine: 'sglang',
        models: [MODEL],
      })),
      providers: [
        {
          name: 'hosted',
          kind: 'openai',
          endpoint: `${provider.url}/v1`,
          models: { [MODEL]: 'hosted' },
          apiKey: { env: PROVIDER_KEY_ENV },
          timeout: '5s',
        },
      ],
      policies: [
        {
          metadata: { name: 'peak', namespace: '*' },
          spec: {
            slo: { ttft: `${SLO_MS}ms`, attainment: '99%' },
            exclude: [],
            overflow: { providers: ['hosted'], deny: { tags: ['pii'] } },
            wait: { max: '2s' },
          },
        },
      ],
    },
    'peak-realtime',
  );
  return startAgent(settings, { log: (level, message) => level === 'error' && console.error(`[agent] ${message}`) });
}

const within = (o: Outcome) => o.ttftMs <= SLO_MS;
const pct = (x: number) => (Number.isFinite(x) ? `${(x * 100).toFixed(1)}%` : '–');

const started: { close(): Promise<void> }[] = [];
try {
  const pods: SimServer[] = [];
  for (const [i, speed] of SPEEDS.entries()) {
    const sim = await startSim({
      engine: 'sglang',
      models: [MODEL],
      maxSeqs: MAX_SEQS,
      speed,
      seed: 500 + i,
      name: `gpu-${i}`,
      latency: { prefillBatchSlowdown: 1.5 },
    });
    pods.push(sim);
    started.push(sim);
  }
  const provider = await startSim({
    models: ['hosted'],
    maxSeqs: 512,
    maxQueue: 100_000,
    seed: 9,
    latency: { stepBaseMs: 30, decodeMsPerSeq: 0.02, prefillMsPerToken: 0.1, prefillBatchSlowdown: 0 },
  });
  started.push(provider);
  process.env[PROVIDER_KEY_ENV] ??= 'peak-key';

  // 1. Capacity: must-stay only, rising rates, one agent (warm by then, as an operator measures).
  const climber = await agentFor(pods, provider);
  await drive(climber.apiUrl, 2, 5000, 1, 5); // a warm-up, not counted: the climb measures the pool, not a cold agent
  let capacity = 0;
  for (const [i, rate] of STEPS.entries()) {
    const outcomes = await drive(climber.apiUrl, rate, STEP_MS, 1, 11 + i);
    const attained = outcomes.filter(within).length / outcomes.length;
    console.log(`capacity step ${rate} req/s: ${outcomes.length} must-stay requests, ${pct(attained)} within SLO`);
    if (attained < 0.98) break;
    capacity = rate;
  }
  await climber.shutdown();
  if (capacity === 0) throw new Error('the pool met the SLO at no step: lower STEPS');
  // Let the pods drain the climb's backlog before the fresh agent arrives.
  await new Promise((resolve) => setTimeout(resolve, 5000));

  // 2. A fresh agent straight into 2× capacity, a quarter must-stay.
  const offered = 2 * capacity;
  const leavableRate = offered * (1 - STAY_SHARE);
  const leftForLeavable = Math.max(0, capacity - offered * STAY_SHARE) / leavableRate;
  console.log(
    `\ncapacity ${capacity} req/s at 98%; peak ${offered} req/s from a fresh agent, ${STAY_SHARE * 100}% must-stay; capacity leaves a local share of ${pct(leftForLeavable)} for leavable requests`,
  );
  const fresh = await agentFor(pods, provider);
  started.push({ close: () => fresh.shutdown() });
  const outcomes = await drive(fresh.apiUrl, offered, PEAK_MS, STAY_SHARE, 77);
  console.log(
    '\n| window | leavable within SLO | leavable local share | vs what capacity leaves | must-stay within SLO |',
  );
  console.log('| --- | ---: | ---: | ---: | ---: |');
  if (values.detail)
    for (let from = 0; from < WINDOW_MS; from += 2000) {
      const w = outcomes.filter((o) => !o.stay && o.at >= from && o.at < from + 2000);
      const local = w.filter((o) => o.route.startsWith('local/'));
      const missed = (os: Outcome[]) => os.filter((o) => !within(o)).length;
      console.log(
        `  ${from / 1000}–${(from + 2000) / 1000} s: ${w.length} leavable, ${local.length} local (${missed(local)} missed), ${missed(w) - missed(local)} overflowed and missed`,
      );
    }
  for (let from = 0; from < PEAK_MS; from += WINDOW_MS) {
    const w = outcomes.filter((o) => o.at >= from && o.at < from + WINDOW_MS);
    const leavable = w.filter((o) => !o.stay);
    const stay = w.filter((o) => o.stay);
    const local = leavable.filter((o) => o.route.startsWith('local/')).length / leavable.length;
    console.log(
      `| ${from / 1000}–${(from + WINDOW_MS) / 1000} s | ${pct(leavable.filter(within).length / leavable.length)} | ${pct(local)} | ${(local / leftForLeavable).toFixed(2)} | ${pct(stay.filter(within).length / stay.length)} |`,
    );
  }
} finally {
  for (const s of started.reverse()) await s.close().catch(() => {});
}
