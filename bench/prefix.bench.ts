// The agent's prefix index: memory per pod at 100,000 cached blocks, and the lookup a routing
// decision makes over 1,000 candidates (one walk over the prompt's blocks for all pods, versus
// probing each candidate). Run: npm run bench:prefix
import { Bench } from 'tinybench';
import { promptBlocks, renderPrompt } from '../agent/prefix/blocks.ts';
import { PrefixIndex } from '../agent/prefix/index.ts';
import { mulberry32 } from '../shared/sim/random.ts';
import { PodPool } from '../agent/pool/pool.ts';
import { decide } from '../agent/route/router.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import { poolOptions, routePolicy, routeRequest } from '../test/helpers/route-fixtures.ts';

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

/** Distinct prompts of `blocks` blocks each: a seeded text, so hashes are realistic and unshared. */
function promptOf(seed: number, blocks: number): number[] {
  const rand = mulberry32(seed);
  let text = '';
  while (text.length < blocks * 64) text += rand().toString(36).slice(2);
  return promptBlocks(text.slice(0, blocks * 64));
}

function heapUsed(): number {
  gc!();
  gc!();
  return process.memoryUsage().heapUsed;
}

// Memory: pods each filled with 100,000 blocks (1,000 prompts of 100 blocks ≈ 1,600 tokens).
const BLOCKS_PER_POD = 100_000;
const memoryRows = [];
for (const pods of [1, 4]) {
  const prompts = Array.from({ length: (pods * BLOCKS_PER_POD) / 100 }, (_, i) => promptOf(i + 1, 100));
  const before = heapUsed();
  const index = new PrefixIndex({ maxBlocksPerPod: BLOCKS_PER_POD });
  prompts.forEach((p, i) => index.record(`pod-${i % pods}`, p));
  const bytes = heapUsed() - before;
  const m = index.memory();
  memoryRows.push({
    pods,
    blocks: m.blocks,
    'MB total': (bytes / 1e6).toFixed(1),
    'MB per pod': (bytes / pods / 1e6).toFixed(1),
    'bytes per block': (bytes / m.blocks).toFixed(0),
  });
  // Keep `index` reachable until measured.
  if (m.blocks === 0) throw new Error('nothing recorded');
}
console.log('index memory (heap delta after GC, hashes precomputed)');
console.table(memoryRows);

// Lookup at 1,000 candidates: every pod holds 20 conversations of its own (realistic), a shared
// system prompt of 32 blocks sits on 100 pods, and this request's 256-block prompt (≈ 4k tokens:
// the system prompt then a long history) on 3 of them.
const CANDIDATES = 1000;
const index = new PrefixIndex();
const system = promptOf(1_000_000, 32);
const request = [...system, ...promptOf(2_000_000, 224)];
for (let p = 0; p < CANDIDATES; p++) {
  for (let c = 0; c < 20; c++) index.record(`pod-${p}`, promptOf(p * 100 + c + 10, 64));
  if (p % 10 === 0) index.record(`pod-${p}`, system);
  if (p < 3) index.record(`pod-${p}`, request.slice(0, 200 + 20 * p));
}
const everywhere = new PrefixIndex();
for (let p = 0; p < CANDIDATES; p++) everywhere.record(`pod-${p}`, request);
const ids = Array.from({ length: CANDIDATES }, (_, p) => `pod-${p}`);
const text = 'x'.repeat(request.length * 64);
const body = {
  model: 'm',
  messages: [
    { role: 'system', content: text.slice(0, 2048) },
    { role: 'user', content: text.slice(2048) },
  ],
};

// A whole decision as the agent makes it: the pool's candidates with each one's expected cached
// tokens (one lookup), then predict → filters → score → pick, against the same without the lookup.
const pool = new PodPool(poolOptions(() => 1000));
pool.setLocalPods(
  ids.map((id) => ({ uid: id, name: id, namespace: 'ns', node: 'n', address: '127.0.0.1:1', models: ['m'] })),
);
for (const id of ids) {
  const telemetry = new PodTelemetry();
  const load = { at: 1000, engine: 'vllm' as const, waiting: 1, running: 4, kvCache: 0.3 };
  telemetry.record(load);
  pool.recordLoad(id, load, telemetry);
}
for (const [p, c] of pool.candidates().entries()) {
  for (let i = 0; i < 20; i++) pool.begin(c, 1024, 'chat', true, promptOf(p * 100 + i + 10, 64)).end(true);
  if (p % 10 === 0) pool.begin(c, 512, 'chat', true, system).end(true);
  if (p < 3) pool.begin(c, 4096, 'chat', true, request.slice(0, 200 + 20 * p)).end(true);
}
const policy = routePolicy({ name: 'b', sloTtftMs: 10_000 });
const decisionRequest = routeRequest({ namespace: 'ns', promptTokens: 4096, promptBlocks: request });
const leave = { allowed: false, reason: 'bench', providers: [] };
const chosen = decide({
  request: decisionRequest,
  policy,
  candidates: pool.candidates(decisionRequest.model, request),
  leave,
  rand: Math.random,
});
if (chosen.action !== 'pod' || chosen.chosen.candidate.pod.uid !== 'pod-2')
  throw new Error('the longest prefix should win');

const bench = new Bench({ time: 500 });
bench.add('decision at 1,000 pods: pool candidates + prefix lookup + decide', () => {
  decide({
    request: decisionRequest,
    policy,
    candidates: pool.candidates(decisionRequest.model, request),
    leave,
    rand: Math.random,
  });
});
bench.add('decision at 1,000 pods: pool candidates + decide, prefix-blind', () => {
  decide({ request: decisionRequest, policy, candidates: pool.candidates(), leave, rand: Math.random });
});
bench.add('render + hash a 16 KB chat prompt (256 blocks), once per request', () => {
  promptBlocks(renderPrompt(body));
});
bench.add('lookup for 1,000 candidates: one walk (prefix on 3, system prompt on 100)', () => {
  index.cachedTokensByPod(request);
});
bench.add('lookup for 1,000 candidates: probe each candidate (same index)', () => {
  for (const id of ids) index.expectedCachedTokens(id, request);
});
bench.add('worst case: the whole 256-block prompt on all 1,000 pods (one walk)', () => {
  everywhere.cachedTokensByPod(request);
});
bench.add('record a 256-block prompt for one pod', () => {
  index.record('pod-7', request);
});
await bench.run();
console.table(
  bench.tasks.map((task) => {
    const r = task.result;
    return { task: task.name, 'µs/op': r.state === 'completed' ? (r.latency.mean * 1000).toFixed(2) : r.state };
  }),
);
