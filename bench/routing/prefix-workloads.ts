// Workloads whose prompts repeat prefixes, for the prefix-cache comparison (bench:routing-prefix).
//
// Each prompt carries real token ids, so the simulated pods' prefix caches hit exactly when a
// prefix really repeats: a conversation's turns resend its whole history (a seeded token stream per
// conversation), an application's requests resend its system prompt (a seeded stream per app).
// Arrivals are open-loop: a conversation's next turn comes a think time after the previous one
// arrived (3–10 s, longer than a turn takes at these loads), so every strategy sees the same arrivals.
import { VirtualClock } from '../../shared/sim/clock.ts';
import { DEFAULT_LATENCY } from '../../shared/sim/latency.ts';
import { chainedBlockHashes } from '../../shared/sim/prefix-cache.ts';
import { DEFAULT_SHAPE, engineFor, type PodShape } from './harness.ts';
import { mulberry32, type Rand } from '../../shared/sim/random.ts';
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
  shape: PodShape = DEFAULT_SHAPE,
): number {
  const clock = new VirtualClock();
  // Its requests carry no token ids: nothing is cached.
  const engine = engineFor(clock, 1, seed, shape);
  const work = generate(seed, 600_000, 10).slice(0, 600);
  for (const a of work) engine.submit({ promptTokens: a.promptTokens, maxTokens: a.maxTokens });
  return (work.length / engine.runUntilIdle()) * 1000;
}

/**
 * A lower bound on each request's TTFT that no router can beat: the request alone on the fastest
 * pod, which holds every block any earlier request computed (prompts and answers, never evicted),
 * so it prefills only the tokens no earlier request had (at least one, as vLLM). Arrivals in time order.
 * Every step at the least jitter, no batch to slow it, no wait: idle first turns included, nothing a
 * router does goes below it (test/bench-floor.test.ts checks each request of real runs against it).
 */
export function ttftFloors(arrivals: readonly Arrival[], shape: PodShape, speeds: readonly number[]): number[] {
  const l = DEFAULT_LATENCY;
  const block = 16;
  const chunk = shape.chunkedPrefill ? 2048 : Infinity;
  const fastest = Math.max(...speeds);
  const seen = new Set<number>();
  return arrivals.map((a) => {
    const tokens = a.tokens ?? [];
    const hashes = chainedBlockHashes(tokens, block);
    let cached = 0;
    while (cached < hashes.length && cached < Math.floor((a.promptTokens - 1) / block) && seen.has(hashes[cached]))
      cached++;
    for (const h of chainedBlockHashes([...tokens, ...(a.outputTokens ?? [])], block)) seen.add(h);
    const uncached = a.promptTokens - cached * block;
    const steps = Math.ceil(uncached / chunk);
    const ms = steps * l.stepBaseMs * shape.decodeScale + uncached * l.prefillMsPerToken * shape.prefillScale;
    return (ms * (1 - l.jitterFrac)) / fastest;
  });
}

/** Users per customer in llm-d's b2b-saas run (inference-perf's shared_prefix num_prompts_per_group). */
export const B2B_USERS = 5;
/** Tokens a customer keeps resident: its context and each user's question (6,000 + 5 × 1,200). */
export const B2B_RESIDENT_TOKENS = 6000 + B2B_USERS * 1200;

/**
 * Cache pressure, shaped like llm-d's b2b-saas run (inference-perf's shared_prefix data: 150 groups
 * of 5 prompts, a 6,000-token system prompt per group, a 1,200-token question per prompt), scaled
 * to the simulator: `customers` customers, each with its own 6,000-token context shared by its 5
 * users, each user with a 1,200-token question of their own that they send again and again. The
 * customers × 5 prompts are shuffled once and sent in that order, round after round (as
 * inference-perf cycles its prompt list), at Poisson times. Resident, a customer takes 12,000
 * tokens of KV: llm-d sized 150 of them at 73% of its 8 pods' KV; here `customers` sets the share.
 * Answers are 50–200 tokens (llm-d: 1,000 with ignore_eos, on engines batching far more than these pods' 16).
 */
export function b2bSaas(seed: number, ms: number, ratePerS: number, customers = 60): Arrival[] {
  const rand = mulberry32(seed);
  const prompts: number[][] = [];
  for (let c = 0; c < customers; c++) {
    const context = tokenStream(seed * 7907 + c)(6000);
    for (let u = 0; u < B2B_USERS; u++)
      prompts.push([...context, ...tokenStream(seed * 15_485_863 + c * B2B_USERS + u)(1200)]);
  }
  for (let i = prompts.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [prompts[i], prompts[j]] = [prompts[j], prompts[i]];
  }
  const out: Arrival[] = [];
  let request = 0;
  for (let at = exp(rand, 1000 / ratePerS); at < ms; at += exp(rand, 1000 / ratePerS)) {
    const tokens = prompts[request++ % prompts.length];
    out.push({ at, promptTokens: tokens.length, maxTokens: between(rand, 50, 200), tokens });
  }
  return out;
}

/** Longest context an agent session grows to before it is cut (a 16k window with room to answer). */
const MAX_AGENT_CONTEXT = 14_000;

/**
 * A tool-using agent trace: sessions start with a 1,500–3,000-token system prompt and tool
 * schemas shared by every session of one of 8 agents; each step resends the whole history plus
 * the tool's result (300–2,000 tokens) and the model's call (50–300 tokens, cached as output), so
 * contexts grow to ~14k tokens. The next step follows 0.5–3 s after the previous one arrived.
 */
export function toolAgent(seed: number, ms: number, ratePerS: number): Arrival[] {
  const rand = mulberry32(seed);
  const agents = Array.from({ length: 8 }, (_, i) => tokenStream(seed * 6151 + i)(between(rand, 1500, 3000)));
  const out: Arrival[] = [];
  // Sessions average ~12 steps; started so the step rate is about `ratePerS`.
  const meanGapMs = (12 / ratePerS) * 1000;
  let session = 0;
  for (let start = -60_000 + exp(rand, meanGapMs); start < ms; start += exp(rand, meanGapMs)) {
    const own = tokenStream(seed * 1_000_033 + ++session);
    const system = agents[Math.floor(rand() * agents.length)];
    const steps = between(rand, 6, 20);
    let history = 0; // tokens of the session's own stream already in the context
    let at = start;
    for (let step = 0; step < steps && at < ms; step++) {
      const result = between(rand, 300, 2000);
      const call = between(rand, 50, 300);
      if (system.length + history + result + call > MAX_AGENT_CONTEXT) break;
      const promptOwn = history + result;
      if (at >= 0) {
        out.push({
          at,
          promptTokens: system.length + promptOwn,
          maxTokens: call,
          tokens: [...system, ...own(promptOwn)],
          outputTokens: own(promptOwn + call).slice(promptOwn),
        });
      }
      history = promptOwn + call;
      at += between(rand, 500, 3000);
    }
  }
  return out.sort((a, b) => a.at - b.at);
}
