// Workloads whose prompts repeat prefixes, for the prefix-cache comparison (bench:routing-prefix),
// and the Gateway API Inference Extension's default profile with its prefix-cache scorer.
//
// Each prompt carries real token ids, so the simulated pods' prefix caches hit exactly when a
// prefix really repeats: a conversation's turns resend its whole history (a seeded token stream per
// conversation), an application's requests resend its system prompt (a seeded stream per app).
// Arrivals are open-loop: a conversation's next turn comes a think time after the previous one
// arrived (3–10 s, longer than a turn takes at these loads), so every strategy sees the same arrivals.
import { promptBlocks } from '../../agent/prefix/blocks.ts';
import { PrefixIndex } from '../../agent/prefix/index.ts';
import { VirtualClock } from '../../shared/sim/clock.ts';
import { SimEngine } from '../../shared/sim/engine.ts';
import { mulberry32, type Rand } from '../../shared/sim/random.ts';
import { PodPool } from '../../agent/pool/pool.ts';
import { decide } from '../../agent/route/router.ts';
import type { EffectivePolicy } from '../../agent/types.ts';
import { benchPolicy, benchRequest, type BenchStrategy, type StrategyFactory } from './strategies.ts';
import type { Arrival } from './workload.ts';

const VOCAB = 128_000;

/** A seeded token stream: the same seed, the same ids, as long as asked. */
function tokenStream(seed: number): (n: number) => number[] {
  const rand = mulberry32(seed);
  const ids: number[] = [];
  return (n) => {
    while (ids.length < n) ids.push(Math.floor(rand() * VOCAB));
    return ids.slice(0, n);
  };
}

const between = (rand: Rand, lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
const exp = (rand: Rand, meanMs: number) => -Math.log(1 - rand()) * meanMs;

/** Longest history a conversation grows to (the 8k context window, with room to answer). */
const MAX_HISTORY_TOKENS = 6000;

/**
 * Multi-turn chat: conversations of 3–20 turns start as a Poisson process; turn k resends the
 * history (a 100–400-token system prompt of its own, every user turn of 30–250 tokens and every
 * answer of 60–250 tokens) plus the new user turn. `ratePerS` is requests (turns) per second.
 */
export function multiTurnChat(seed: number, ms: number, ratePerS: number): Arrival[] {
  // Conversations run for up to ~2 minutes: they start well before 0 so the rate is steady from
  // the first second. Starts are paced by the mean turns a conversation really has (cut short by
  // the context window), measured once on a long seeded run.
  return conversations(seed, ms, 150_000, (meanTurns() / ratePerS) * 1000);
}

let measuredTurns: number | undefined;
function meanTurns(): number {
  if (measuredTurns === undefined) {
    const hourMs = 3_600_000;
    const arrivals = conversations(1, hourMs, 0, 1000);
    const started = new Set(arrivals.map((a) => a.tokens![0])).size; // first token names the conversation
    measuredTurns = arrivals.length / started;
  }
  return measuredTurns;
}

function conversations(seed: number, ms: number, warmupMs: number, meanGapMs: number): Arrival[] {
  const rand = mulberry32(seed);
  const out: Arrival[] = [];
  let conversation = 0;
  for (let start = -warmupMs + exp(rand, meanGapMs); start < ms; start += exp(rand, meanGapMs)) {
    const stream = tokenStream(seed * 1_000_003 + ++conversation);
    const turns = between(rand, 3, 20);
    let history = between(rand, 100, 400);
    let at = start;
    for (let turn = 0; turn < turns && at < ms; turn++) {
      const prompt = history + between(rand, 30, 250);
      const answer = between(rand, 60, 250);
      if (prompt + answer > MAX_HISTORY_TOKENS) break;
      if (at >= 0)
        out.push({
          at,
          promptTokens: prompt,
          maxTokens: answer,
          tokens: stream(prompt),
          outputTokens: stream(prompt + answer).slice(prompt),
        });
      history = prompt + answer;
      at += between(rand, 3000, 10_000);
    }
  }
  return out.sort((a, b) => a.at - b.at);
}

/** Enough applications that their prompts (~100k tokens) overflow one pod's cache but not the pool's. */
const APPS = 48;

/**
 * RAG / agents: 48 applications, each with its system prompt and tool schemas of 1,500–3,000
 * tokens, chosen with Zipf-like popularity (1/rank); every request is that prompt plus a short
 * user turn of 20–200 tokens of its own. Poisson arrivals at `ratePerS`.
 */
export function sharedSystemPrompt(seed: number, ms: number, ratePerS: number): Arrival[] {
  const rand = mulberry32(seed);
  const apps = Array.from({ length: APPS }, (_, i) => ({
    tokens: tokenStream(seed * 7919 + i)(between(rand, 1500, 3000)),
    weight: 1 / (i + 1),
  }));
  const total = apps.reduce((s, a) => s + a.weight, 0);
  const out: Arrival[] = [];
  let request = 0;
  for (let at = exp(rand, 1000 / ratePerS); at < ms; at += exp(rand, 1000 / ratePerS)) {
    let pick = rand() * total;
    const app = apps.find((a) => (pick -= a.weight) < 0) ?? apps[apps.length - 1];
    const user = tokenStream(seed * 104_729 + ++request)(between(rand, 20, 200));
    const tokens = [...app.tokens, ...user];
    out.push({ at, promptTokens: tokens.length, maxTokens: between(rand, 32, 224), tokens });
  }
  return out;
}

/** The control: the multi-turn workload's sizes and timing, but every prompt's tokens are its own. */
export function noSharing(seed: number, ms: number, ratePerS: number): Arrival[] {
  return multiTurnChat(seed, ms, ratePerS).map((a, i) => ({
    ...a,
    tokens: tokenStream(seed * 31 + i)(a.promptTokens),
    outputTokens: undefined,
  }));
}

/**
 * Requests per second one speed-1 pod completes when saturated with these arrivals and nothing
 * cached: the load of a scenario is a fraction of the prefix-blind capacity, so what caching
 * buys shows as lower latency at the same offered load.
 */
export function calibrateWorkload(
  generate: (seed: number, ms: number, ratePerS: number) => Arrival[],
  seed = 99,
): number {
  const clock = new VirtualClock();
  const engine = new SimEngine({ maxSeqs: 16, seed, maxQueue: 100_000, prefixCaching: false }, clock);
  const work = generate(seed, 600_000, 10).slice(0, 600);
  for (const a of work) engine.submit({ promptTokens: a.promptTokens, maxTokens: a.maxTokens });
  return (work.length / engine.runUntilIdle()) * 1000;
}

/**
 * Text a client would have sent for these token ids, 4 characters per id, so the agent's
 * character-based blocks (agent/prefix/blocks.ts) line up with the pods' 16-token blocks. Real
 * tokenizers don't align like this; here the router-side index is as accurate as it can be.
 */
function textOf(tokens: readonly number[]): string {
  let text = '';
  for (const id of tokens) text += id.toString(36).padStart(4, '0');
  return text;
}

/**
 * The Gateway API Inference Extension's default scheduling profile with its prefix-cache scorer:
 * queue scorer (min–max normalised waiting requests), KV-cache-utilisation scorer (1 − usage) and
 * prefix-cache scorer (share of the prompt's blocks the router last sent to that pod, from its own
 * per-pod LRU of block hashes), equal weights, highest total wins, ties at random. The prefix index
 * is agent/prefix's, fed the same way GIE feeds its own: every routed prompt is recorded for its pod.
 */
export const gieWithPrefix: StrategyFactory = (ctx): BenchStrategy => {
  const index = new PrefixIndex();
  return {
    choose: (a) => {
      const blocks = promptBlocks(textOf(a.tokens ?? []));
      const cached = index.cachedTokensByPod(blocks);
      const loads = ctx.pods.map((p) => p.lastLoad);
      const queues = loads.map((l) => l?.waiting ?? 0);
      const minQ = Math.min(...queues);
      const maxQ = Math.max(...queues);
      const scores = ctx.pods.map((p, i) => {
        const queueScore = maxQ === minQ ? 1 : (maxQ - queues[i]) / (maxQ - minQ);
        const kv = loads[i]?.kvCache;
        const kvScore = 1 - (Number.isFinite(kv) ? (kv as number) : 0);
        const prefixScore = blocks.length > 0 ? (cached.get(p.pod.uid) ?? 0) / (blocks.length * index.blockTokens) : 0;
        return queueScore + kvScore + prefixScore;
      });
      const best = Math.max(...scores);
      const ties = scores.flatMap((s, i) => (s === best ? [i] : []));
      const pod = ties[Math.floor(ctx.rand() * ties.length)];
      index.record(ctx.pods[pod].pod.uid, blocks);
      return { pod };
    },
  };
};

/**
 * A preview of phase B with the production pool and router unmodified: each candidate's
 * prediction is shifted by the prefill its expected cached tokens save (perKPromptTokens × cached,
 * carried in the candidate's networkCostMs, which the router adds to the prediction and nothing
 * else), the pool learns from the uncached tokens it sent, and the scraped prompt-token counter is
 * read net of vLLM's prefix-cache hits, as phase B's telemetry will read it. The prefix index is
 * aged by each pod's scraped KV usage and computed tokens.
 */
export const kinferencePrefixPreview: StrategyFactory = (ctx): BenchStrategy => {
  const pool = new PodPool({
    node: 'bench',
    scrapeIntervalMs: ctx.scrapeIntervalMs,
    peerMaxAgeMs: 3000,
    networkCostMs: 0,
    referenceWindowMs: 30_000,
    failureCooldownMs: 1000,
    now: ctx.now,
  });
  pool.setLocalPods(ctx.pods.map((p) => p.pod));
  const index = new PrefixIndex();
  const indexOf = new Map(ctx.pods.map((p) => [p.pod.uid, p.index]));
  const policy = benchPolicy(ctx.sloMs);
  const fallback: EffectivePolicy = { ...policy, sloTtftMs: Infinity, exclude: [] };
  const stay = { allowed: false, reason: 'bench', providers: [] };
  return {
    scraped: (p, load) => {
      // What /metrics says: vllm:prefix_cache_hits_total and the cache_config_info block count.
      const s = p.engine.snapshot();
      const computed = s.counters.prefixQueries - s.counters.prefixHits;
      pool.recordLoad(
        p.pod.uid,
        { ...load, promptTokens: (load.promptTokens ?? 0) - s.counters.prefixHits },
        p.telemetry,
      );
      index.observe(p.pod.uid, {
        capacityBlocks: s.kvCapacityTokens / index.blockTokens,
        kvUsage: load.kvCache,
        computedTokens: computed,
      });
    },
    choose: (a) => {
      const blocks = promptBlocks(textOf(a.tokens ?? []));
      const cachedByPod = index.cachedTokensByPod(blocks);
      const uncachedFor = (uid: string) =>
        Math.max(1, a.promptTokens - Math.min(a.promptTokens - 1, cachedByPod.get(uid) ?? 0));
      const candidates = pool.candidates().map((c) => ({
        ...c,
        networkCostMs: c.networkCostMs - (c.params.perKPromptTokens * (a.promptTokens - uncachedFor(c.pod.uid))) / 1000,
      }));
      const request = benchRequest(a);
      let d = decide({ request, policy, candidates, leave: stay, rand: ctx.rand });
      if (d.action !== 'pod') d = decide({ request, policy: fallback, candidates, leave: stay, rand: ctx.rand });
      if (d.action !== 'pod') throw new Error('no pod at all');
      const chosen = d.chosen.candidate;
      const ticket = pool.begin(chosen, uncachedFor(chosen.pod.uid));
      index.record(chosen.pod.uid, blocks);
      return {
        pod: indexOf.get(chosen.pod.uid)!,
        predictedMs: d.predictedTtftMs,
        firstToken: (ms) => ticket.firstByte(ms),
        done: () => ticket.end(true),
      };
    },
  };
};
