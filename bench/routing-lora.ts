// `npm run bench:routing-lora`: many LoRA adapters over four simulated vLLM pods with --max-loras 4,
// in virtual time. The same recorded arrivals (adapters drawn by a Zipf popularity, plus base-model
// traffic) go to Kinference with adapter affinity, Kinference adapter-blind (the same router, pods
// not known to serve adapters), least-request and round-robin. Each pod's scrape goes through the
// agent's own reading of vllm:lora_requests_info. Writes bench/results/routing-lora.json.
// Base-model p90 differs between strategies by less than it varies from seed to seed, so the bench
// runs 10 seeds and prints each seed's base p90 for affinity and adapter-blind side by side.
import { mkdirSync, writeFileSync } from 'node:fs';
import { PodPool } from '../agent/pool/pool.ts';
import { decide } from '../agent/route/router.ts';
import { loraStateOf } from '../agent/telemetry/lora.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import type { EffectivePolicy, Pod, PodLoad } from '../agent/types.ts';
import { BUCKETS } from '../shared/sim/buckets.ts';
import { VirtualClock } from '../shared/sim/clock.ts';
import { SimEngine } from '../shared/sim/engine.ts';
import { DEFAULT_LATENCY } from '../shared/sim/latency.ts';
import { mulberry32 } from '../shared/sim/random.ts';
import { loadOf, percentile, SCRAPE_INTERVAL_MS } from './routing/harness.ts';
import { benchPolicy } from './routing/strategies.ts';
import { poolOptions, routeRequest } from '../test/helpers/route-fixtures.ts';

const PODS = 4;
const MAX_LORAS = 4;
const LORA_LOAD_MS = 40;
const ADAPTERS = Number(process.env.ADAPTERS ?? 32);
const BASE_SHARE = 0.3;
const DURATION_MS = 120_000;
const SLO_MS = 1000;
const SEEDS = Number(process.env.SEEDS ?? 10);
const LOADS = (process.env.LOADS ?? '1,1.5').split(',').map(Number); // requests/s per pod
const BASE = 'llama-3-8b';
const adapterNames = Array.from({ length: ADAPTERS }, (_, i) => `adapter-${i}`);

interface Arrival {
  at: number;
  promptTokens: number;
  maxTokens: number;
  adapter?: string;
}

/** Poisson arrivals; each names an adapter (Zipf, s = 1) or, with BASE_SHARE, the base model. */
function arrivals(seed: number, ratePerS: number): Arrival[] {
  const rand = mulberry32(seed);
  const weights = adapterNames.map((_, i) => 1 / (i + 1));
  const total = weights.reduce((a, b) => a + b, 0);
  const pick = () => {
    let r = rand() * total;
    for (let i = 0; i < weights.length; i++) if ((r -= weights[i]!) <= 0) return adapterNames[i]!;
    return adapterNames.at(-1)!;
  };
  const out: Arrival[] = [];
  for (let t = 0; ;) {
    t += (-Math.log(1 - rand()) / ratePerS) * 1000;
    if (t >= DURATION_MS) break;
    const promptTokens = 50 + Math.floor(1450 * rand() ** 2);
    const maxTokens = 32 + Math.floor(rand() * 192);
    out.push({ at: t, promptTokens, maxTokens, ...(rand() < BASE_SHARE ? {} : { adapter: pick() }) });
  }
  return out;
}

interface BenchPod {
  pod: Pod;
  engine: SimEngine;
  inFlight: number;
  telemetry: PodTelemetry;
}

type Choose = (a: Arrival, pods: BenchPod[]) => { pod: number; done?: () => void };
type Strategy = { scraped?: (p: BenchPod, load: PodLoad) => void; choose: Choose };

/** A scrape as the agent reads it: the vLLM load, its LoRA gauge through the agent's parser. */
function scrape(engine: SimEngine): PodLoad {
  const s = engine.snapshot();
  const lora = s.lora
    ? loraStateOf(
        s.lora.history.map((h) => ({
          labels: {
            max_lora: String(s.lora!.maxLoras),
            running_lora_adapters: h.running,
            waiting_lora_adapters: h.waiting,
          },
          value: h.at,
        })),
      )
    : undefined;
  return { ...loadOf(s), ...(lora ? { lora } : {}) };
}

/** Kinference's pool and router; `aware`: the pods are known to serve the adapters (else: plain models). */
function kinference(pods: BenchPod[], clock: VirtualClock, rand: () => number, aware: boolean): Strategy {
  const pool = new PodPool(poolOptions(() => clock.now(), { node: 'bench', scrapeIntervalMs: SCRAPE_INTERVAL_MS }));
  pool.setLocalPods(pods.map((p) => (aware ? p.pod : { ...p.pod, adapters: undefined })));
  const policy = benchPolicy(SLO_MS);
  const fallback: EffectivePolicy = { ...policy, sloTtftMs: Infinity, exclude: [] };
  const stay = { allowed: false, reason: 'bench', providers: [] };
  const index = new Map(pods.map((p, i) => [p.pod.uid, i]));
  return {
    scraped: (p, load) => pool.recordLoad(p.pod.uid, load, p.telemetry),
    choose: (a) => {
      const request = { ...routeRequest({ promptTokens: a.promptTokens }), model: a.adapter ?? BASE };
      const candidates = pool.candidates(request.model);
      let d = decide({ request, policy, candidates, leave: stay, rand });
      if (d.action !== 'pod') d = decide({ request, policy: fallback, candidates, leave: stay, rand });
      if (d.action !== 'pod') throw new Error('no pod');
      const ticket = pool.begin(d.chosen.candidate, a.promptTokens, 'chat', true, undefined, request.model);
      return { pod: index.get(d.chosen.candidate.pod.uid)!, done: () => ticket.end(true) };
    },
  };
}

const leastRequest = (rand: () => number): Strategy => ({
  choose: (_a, pods) => {
    const least = Math.min(...pods.map((p) => p.inFlight));
    const ties = pods.flatMap((p, i) => (p.inFlight === least ? [i] : []));
    return { pod: ties[Math.floor(rand() * ties.length)]! };
  },
});

const roundRobin = (): Strategy => {
  let next = 0;
  return { choose: (_a, pods) => ({ pod: next++ % pods.length }) };
};

interface Result {
  p50: number;
  p90: number;
  p99: number;
  baseP90: number;
  adapterP90: number;
  attainment: number;
  adapterLoads: number;
}

function run(seed: number, ratePerPodS: number, make: (pods: BenchPod[], clock: VirtualClock) => Strategy): Result {
  const clock = new VirtualClock();
  const pods: BenchPod[] = Array.from({ length: PODS }, (_, i) => ({
    pod: {
      uid: `bench/pod-${i}`,
      name: `pod-${i}`,
      namespace: 'bench',
      node: 'bench',
      address: `sim:${i}`,
      models: [BASE, ...adapterNames],
      adapters: adapterNames,
      engine: 'vllm',
    },
    engine: new SimEngine(
      {
        maxSeqs: 16,
        seed: seed * 100 + i,
        maxQueue: 100_000,
        maxBatchedTokens: 2048,
        buckets: BUCKETS.vllm,
        latency: DEFAULT_LATENCY,
        maxLoras: MAX_LORAS,
        loraLoadMs: LORA_LOAD_MS,
      },
      clock,
    ),
    inFlight: 0,
    telemetry: new PodTelemetry(),
  }));
  const strategy = make(pods, clock);
  const all: number[] = [];
  const base: number[] = [];
  const adapted: number[] = [];
  let nextScrape = 0;
  const advance = (t: number) => {
    clock.set(t);
    for (const p of pods) p.engine.advanceTo(t);
  };
  const work = arrivals(seed, ratePerPodS * PODS);
  for (const a of work) {
    while (nextScrape <= a.at) {
      advance(nextScrape);
      for (const p of pods) {
        const load = scrape(p.engine);
        p.telemetry.record(load);
        strategy.scraped?.(p, load);
      }
      nextScrape += SCRAPE_INTERVAL_MS;
    }
    advance(a.at);
    const choice = strategy.choose(a, pods);
    const pod = pods[choice.pod]!;
    pod.inFlight++;
    pod.engine.submit(
      { promptTokens: a.promptTokens, maxTokens: a.maxTokens, ...(a.adapter ? { adapter: a.adapter } : {}) },
      {
        onToken: (at, n) => {
          if (n !== 1) return;
          all.push(at - a.at);
          (a.adapter ? adapted : base).push(at - a.at);
        },
        onDone: () => {
          pod.inFlight--;
          choice.done?.();
        },
      },
    );
  }
  for (const p of pods) p.engine.runUntilIdle();
  const sort = (xs: number[]) => xs.sort((x, y) => x - y);
  sort(all);
  return {
    p50: percentile(all, 0.5),
    p90: percentile(all, 0.9),
    p99: percentile(all, 0.99),
    baseP90: percentile(sort(base), 0.9),
    adapterP90: percentile(sort(adapted), 0.9),
    attainment: all.filter((t) => t <= SLO_MS).length / work.length,
    adapterLoads: pods.reduce((n, p) => n + (p.engine.snapshot().lora?.loads ?? 0), 0),
  };
}

const STRATEGIES: [string, (pods: BenchPod[], clock: VirtualClock, seed: number) => Strategy][] = [
  ['kinference, adapter affinity', (pods, clock, seed) => kinference(pods, clock, mulberry32(seed + 2), true)],
  ['kinference, adapter-blind', (pods, clock, seed) => kinference(pods, clock, mulberry32(seed + 2), false)],
  ['least-request', (_p, _c, seed) => leastRequest(mulberry32(seed + 2))],
  ['round-robin', () => roundRobin()],
];

const results: Record<string, Record<string, Result>> = {};
const basePerSeed: Record<string, Record<string, number[]>> = {};
const started = performance.now();
for (const load of LOADS) {
  const scenario = `${ADAPTERS} adapters, ${load} req/s per pod`;
  results[scenario] = {};
  basePerSeed[scenario] = {};
  console.log(`\n${scenario} (${SEEDS} seeds, ${DURATION_MS / 1000} s, SLO ${SLO_MS} ms)`);
  console.log('| strategy | TTFT p50 | p90 | p99 | base p90 | adapter p90 | SLO attainment | adapter loads |');
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const [name, make] of STRATEGIES) {
    const runs = Array.from({ length: SEEDS }, (_, i) => run(31 + i, load, (pods, clock) => make(pods, clock, 31 + i)));
    const mean = (f: (r: Result) => number) => runs.reduce((s, r) => s + f(r), 0) / runs.length;
    const r: Result = {
      p50: mean((x) => x.p50),
      p90: mean((x) => x.p90),
      p99: mean((x) => x.p99),
      baseP90: mean((x) => x.baseP90),
      adapterP90: mean((x) => x.adapterP90),
      attainment: mean((x) => x.attainment),
      adapterLoads: mean((x) => x.adapterLoads),
    };
    results[scenario][name] = r;
    basePerSeed[scenario][name] = runs.map((x) => Math.round(x.baseP90));
    const ms = (v: number) => `${Math.round(v)} ms`;
    console.log(
      `| ${name} | ${ms(r.p50)} | ${ms(r.p90)} | ${ms(r.p99)} | ${ms(r.baseP90)} | ${ms(r.adapterP90)} | ${(100 * r.attainment).toFixed(1)}% | ${Math.round(r.adapterLoads)} |`,
    );
  }
  const affinity = basePerSeed[scenario]['kinference, adapter affinity'] ?? [];
  const blind = basePerSeed[scenario]['kinference, adapter-blind'] ?? [];
  const lower = affinity.filter((v, i) => v < blind[i]!).length;
  const pairs = affinity.map((v, i) => `${v}/${blind[i]}`).join(' ');
  console.log(`\nbase p90 per seed, affinity / adapter-blind (ms): ${pairs}`);
  console.log(`affinity lower in ${lower} of ${SEEDS} seeds`);
}
mkdirSync('bench/results', { recursive: true });
writeFileSync('bench/results/routing-lora.json', JSON.stringify({ results, basePerSeed }, null, 2) + '\n');
console.log(`\n${((performance.now() - started) / 1000).toFixed(1)} s`);
