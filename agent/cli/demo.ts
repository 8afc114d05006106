// `kinference demo`: the product in one process. Four simulated vLLM pods of different speeds,
// a simulated hosted provider, one agent with a policy that overflows only what may leave, and
// a load that ramps past local capacity and back. A quarter of the requests come from a batch
// tenant with a small overflow budget, which it spends at the peak. Prints a live summary each
// second; stops after --duration seconds (or Ctrl-C) and leaves nothing running.
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { startAgent } from '../agent.ts';
import { usedTokens } from '../budget/spend.ts';
import { settingsFromObject } from '../config/load.ts';
import { DEFAULT_LATENCY } from '../../shared/sim/latency.ts';
import { mulberry32 } from '../../shared/sim/random.ts';
import { startSim, type SimServer } from '../../shared/sim/server.ts';

const MODEL = 'llama-3-8b';
const SPEEDS = [1, 1, 0.6, 0.4];
const MAX_SEQS = 8;
const MEAN_OUTPUT_TOKENS = 48;
const SLO_MS = 800;
const PII_SHARE = 0.2;
const PROVIDER_KEY_ENV = 'KINFERENCE_DEMO_PROVIDER_KEY';
/** Share of requests from the batch tenant, and its overflow budget (tokens per hour). */
const BATCH_SHARE = 0.25;
const BATCH_BUDGET_TOKENS = 8000;
const HOUR_MS = 3_600_000;

/** Mean prompt of the demo's requests (words × ~6 characters / 4 characters per token). */
const MEAN_PROMPT_TOKENS = 330;

/**
 * Requests per second the local pods sustain, from the simulator's latency model: each request
 * costs its prefill (at a busy batch) plus its share of the batch's decode steps.
 */
function localCapacityPerS(): number {
  const L = DEFAULT_LATENCY;
  const stepMs = L.stepBaseMs + L.decodeMsPerSeq * MAX_SEQS;
  const prefillMs = MEAN_PROMPT_TOKENS * L.prefillMsPerToken * (1 + L.prefillBatchSlowdown);
  const perPod = 1000 / (prefillMs + (MEAN_OUTPUT_TOKENS * stepMs) / MAX_SEQS);
  return SPEEDS.reduce((sum, speed) => sum + perPod * speed, 0);
}

/** The offered load over the run, as a fraction of local capacity: ramp to 1.7×, then ease off. */
function loadAt(fraction: number): number {
  if (fraction < 0.6) return 0.3 + (1.7 - 0.3) * (fraction / 0.6);
  return 1.7 - (1.7 - 0.5) * ((fraction - 0.6) / 0.4);
}

interface Outcome {
  route: string;
  ttftMs: number;
  ok: boolean;
  /** Tagged pii: may not leave the cluster. */
  pii: boolean;
  /** Sent while the offered load was above local capacity. */
  peak: boolean;
  tenant: 'demo' | 'batch';
  /** Overflowed: prompt + completion tokens the provider reported (its stream's usage chunk). */
  overflowTokens?: number;
  /** 429 overflow_budget_exhausted: the Retry-After it carried (s). */
  budgetRetryAfterS?: number;
  /** The budget's hour window when the request was sent. */
  hour: number;
}

/** Share of `items` answered within the SLO, as a percentage string. */
function withinSlo(items: Outcome[]): string {
  return items.length
    ? `${((100 * items.filter((o) => o.ok && o.ttftMs <= SLO_MS).length) / items.length).toFixed(1)}%`
    : '–';
}

class Summary {
  readonly outcomes: Outcome[] = [];
  inFlight = 0;
  readonly startedAt = performance.now();
  /** Seconds into the run of the batch tenant's first 429 for its spent budget. */
  firstBudgetRefusalS: number | undefined;

  line(elapsedS: number, offered: number, window: Outcome[]): string {
    const share = (items: Outcome[], prefix: string) =>
      items.length ? Math.round((100 * items.filter((o) => o.route.startsWith(prefix)).length) / items.length) : 0;
    const ok = window
      .filter((o) => o.ok)
      .map((o) => o.ttftMs)
      .sort((a, b) => a - b);
    const pct = (q: number) =>
      ok.length ? `${Math.round(ok[Math.min(ok.length - 1, Math.floor(q * ok.length))])}` : '–';
    const inSlo = window.length
      ? Math.round((100 * window.filter((o) => o.ok && o.ttftMs <= SLO_MS).length) / window.length)
      : 100;
    return (
      `${String(elapsedS).padStart(4)}s  offered ${offered.toFixed(1).padStart(5)}/s  answered ${String(this.outcomes.length).padStart(5)}  in flight ${String(this.inFlight).padStart(3)}` +
      `  local ${String(share(window, 'local')).padStart(3)}%  overflow ${String(share(window, 'overflow')).padStart(3)}%  rejected ${String(share(window, 'rejected')).padStart(3)}%` +
      `  TTFT p50 ${pct(0.5).padStart(5)} p90 ${pct(0.9).padStart(5)} ms  in SLO ${String(inSlo).padStart(3)}%` +
      ` (may leave ${withinSlo(window.filter((o) => !o.pii)).padStart(6)}, may not ${withinSlo(window.filter((o) => o.pii)).padStart(6)})` +
      `  batch budget ${String(this.batchSpent()).padStart(6)}/${BATCH_BUDGET_TOKENS}`
    );
  }

  /** The batch tenant's overflow tokens in the most it spent in one budget window. */
  batchSpent(): number {
    const byHour = new Map<number, number>();
    for (const o of this.outcomes)
      if (o.overflowTokens !== undefined && o.tenant === 'batch')
        byHour.set(o.hour, (byHour.get(o.hour) ?? 0) + o.overflowTokens);
    return Math.max(0, ...byHour.values());
  }

  final(): string {
    const all = this.outcomes;
    const by = (prefix: string) => all.filter((o) => o.route.startsWith(prefix)).length;
    const pii = all.filter((o) => o.pii);
    const piiLeft = pii.filter((o) => o.route.startsWith('overflow')).length;
    const ok = all.filter((o) => o.ok);
    const inSlo = ok.filter((o) => o.ttftMs <= SLO_MS).length;
    return [
      `requests ${all.length}: local ${by('local')}, overflow ${by('overflow')}, rejected ${by('rejected')} (failed ${all.length - ok.length})`,
      `TTFT SLO ${SLO_MS} ms met by ${all.length ? ((100 * inSlo) / all.length).toFixed(1) : '–'}% of requests`,
      `  requests that may leave:     ${withinSlo(all.filter((o) => !o.pii))} overall, ${withinSlo(all.filter((o) => !o.pii && o.peak))} at the peak (offered above local capacity)`,
      `  requests that may not leave: ${withinSlo(all.filter((o) => o.pii))} overall, ${withinSlo(all.filter((o) => o.pii && o.peak))} at the peak`,
      `PII-tagged requests ${pii.length}: ${pii.length - piiLeft} served in the cluster, ${piiLeft} sent to a provider${piiLeft === 0 ? ' (policy held)' : ' — POLICY VIOLATED'}`,
      this.batchLine(),
    ].join('\n');
  }

  batchLine(): string {
    const batch = this.outcomes.filter((o) => o.tenant === 'batch');
    const overflowed = batch.filter((o) => o.overflowTokens !== undefined);
    const refused = batch.filter((o) => o.budgetRetryAfterS !== undefined);
    const peakOverflow = overflowed.filter((o) => o.peak).length;
    const spent = this.batchSpent();
    const retry = refused.map((o) => o.budgetRetryAfterS!);
    return [
      `Batch tenant (overflow budget ${BATCH_BUDGET_TOKENS} tokens/hour) ${batch.length} requests: ${overflowed.length} overflowed (${peakOverflow} at the peak), ${spent} tokens as the provider reported,` +
        ` ${spent <= BATCH_BUDGET_TOKENS ? 'within budget' : 'OVER BUDGET'}`,
      `  ${BATCH_BUDGET_TOKENS - spent} tokens left; ${refused.length} answered 429 overflow_budget_exhausted` +
        (this.firstBudgetRefusalS !== undefined ? ` (the first at ${this.firstBudgetRefusalS} s)` : '') +
        (retry.length ? ` (Retry-After ${Math.min(...retry)}–${Math.max(...retry)} s, when the hour refills)` : '') +
        `; ${batch.filter((o) => o.ok && o.route.startsWith('local')).length} served by the cluster's pods`,
    ].join('\n');
  }
}

function prompt(rand: () => number, withPii: boolean): string {
  const words = ['latency', 'cluster', 'tokens', 'gpu', 'batch', 'queue', 'policy', 'route', 'model', 'answer'];
  const n = 20 + Math.floor(rand() * 400);
  const text = Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(' ');
  return withPii ? `${text}. Reply to jane.doe@example.com about the invoice.` : text;
}

async function sendOne(
  apiUrl: string,
  rand: () => number,
  summary: Summary,
  signal: AbortSignal,
  peak: boolean,
): Promise<void> {
  const pii = rand() < PII_SHARE;
  const tenant = rand() < BATCH_SHARE ? 'batch' : 'demo';
  const body = JSON.stringify({
    model: MODEL,
    stream: true,
    // The batch tenant's usage comes back in the stream's last chunk, so the summary can count it.
    ...(tenant === 'batch' ? { stream_options: { include_usage: true } } : {}),
    max_tokens: Math.round(MEAN_OUTPUT_TOKENS * (0.5 + rand())),
    messages: [{ role: 'user', content: prompt(rand, pii) }],
  });
  const started = performance.now();
  const hour = Math.floor(Date.now() / HOUR_MS);
  summary.inFlight++;
  let outcome: Outcome = { route: 'rejected', ttftMs: NaN, ok: false, pii, peak, tenant, hour };
  try {
    const response = await request(`${apiUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-kinference-tenant': tenant },
      body,
      signal,
    });
    const route = String(response.headers['x-kinference-route'] ?? 'rejected');
    const counted = tenant === 'batch' && route.startsWith('overflow');
    let tail: Buffer[] = [];
    // Counted at the first token, so each second's line shows the routing of that second.
    for await (const chunk of response.body) {
      if (counted) tail = [...tail.slice(-3), chunk as Buffer]; // the usage chunk comes last
      if (outcome.ok || chunk.length === 0) continue;
      outcome = {
        route,
        ttftMs: performance.now() - started,
        ok: response.statusCode === 200,
        pii,
        peak,
        tenant,
        hour,
      };
      summary.outcomes.push(outcome);
    }
    if (!outcome.ok) {
      const budget = response.headers['x-kinference-budget'] !== undefined;
      const retryAfter = Number(response.headers['retry-after']);
      outcome = {
        route,
        ttftMs: NaN,
        ok: false,
        pii,
        peak,
        tenant,
        hour,
        ...(budget ? { budgetRetryAfterS: retryAfter } : {}),
      };
    } else if (counted) outcome.overflowTokens = usedTokens(Buffer.concat(tail), true) ?? 0;
  } catch {
    // Aborted at the end of the run, or the agent refused the connection: counted as failed.
  } finally {
    summary.inFlight--;
    if (!outcome.ok && !signal.aborted) summary.outcomes.push(outcome);
    if (outcome.budgetRetryAfterS !== undefined)
      summary.firstBudgetRefusalS ??= Math.round((performance.now() - summary.startedAt) / 1000);
  }
}

/** The agent's settings for the demo: its four pods, the hosted provider, and two tenants' policies. */
function demoSettings(pods: readonly SimServer[], provider: SimServer) {
  return settingsFromObject(
    {
      node: 'demo-node',
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
      scrapeInterval: '100ms',
      pods: pods.map((sim, i) => ({
        name: `gpu-${i}`,
        namespace: 'inference',
        address: new URL(sim.url).host,
        engine: 'vllm',
        models: [MODEL],
      })),
      providers: [
        {
          name: 'hosted',
          kind: 'openai',
          endpoint: `${provider.url}/v1`,
          models: { [MODEL]: 'hosted-llama-3-8b' },
          apiKey: { env: PROVIDER_KEY_ENV },
          timeout: '5s',
        },
      ],
      policies: [
        {
          metadata: { name: 'demo', namespace: '*' },
          spec: {
            slo: { ttft: `${SLO_MS}ms`, attainment: '99%' },
            exclude: [{ metric: 'queued', above: 2, window: '5s' }],
            overflow: { providers: ['hosted'], deny: { tags: ['pii'] } },
            wait: { max: '3s' },
          },
        },
        // The batch tenant (its namespace): the same, with a small overflow budget.
        {
          metadata: { name: 'batch', namespace: 'batch' },
          spec: {
            slo: { ttft: `${SLO_MS}ms`, attainment: '99%' },
            exclude: [{ metric: 'queued', above: 2, window: '5s' }],
            // deny.tags left out: a namespace policy inherits the platform floor's (pii, unscanned).
            overflow: {
              providers: ['hosted'],
              budget: { limits: [{ window: 'hour', tokens: BATCH_BUDGET_TOKENS }] },
            },
            wait: { max: '3s' },
          },
        },
      ],
    },
    'demo',
  );
}

export async function runDemoCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: { duration: { type: 'string', default: '60' }, seed: { type: 'string', default: '1' } },
    strict: true,
  });
  const durationS = Number(values.duration);
  if (!Number.isFinite(durationS) || durationS <= 0) {
    console.error('kinference demo: --duration must be a positive number of seconds');
    return 2;
  }
  const rand = mulberry32(Number(values.seed));
  const started: { close(): Promise<void> }[] = [];
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const pods: SimServer[] = [];
    for (const [i, speed] of SPEEDS.entries()) {
      const sim = await startSim({ models: [MODEL], maxSeqs: MAX_SEQS, speed, seed: 100 + i, name: `gpu-${i}` });
      started.push(sim);
      pods.push(sim);
    }
    // A hosted endpoint: slower to first token (a WAN away) but, for our load, unlimited.
    const provider = await startSim({
      models: ['hosted-llama-3-8b'],
      maxSeqs: 512,
      maxQueue: 100_000,
      seed: 7,
      latency: { stepBaseMs: 30, decodeMsPerSeq: 0.02, prefillMsPerToken: 0.1, prefillBatchSlowdown: 0 },
    });
    started.push(provider);
    process.env[PROVIDER_KEY_ENV] ??= 'demo-key';

    const settings = demoSettings(pods, provider);
    const agent = await startAgent(settings, {
      log: (level, message) => level !== 'info' && console.error(`  [agent ${level}] ${message}`),
    });
    started.push({ close: () => agent.shutdown() });

    const capacity = localCapacityPerS();
    console.log(
      `Kinference demo: ${SPEEDS.length} simulated vLLM pods (speeds ${SPEEDS.join(', ')}; ~${capacity.toFixed(1)} req/s together), one simulated hosted provider.`,
    );
    console.log(
      `Agent: ${agent.apiUrl}/v1 (OpenAI-compatible)   dashboard: ${agent.adminUrl}/ui   explain: ${agent.adminUrl}/explain?model=${MODEL}`,
    );
    console.log(
      `Policy: TTFT SLO ${SLO_MS} ms at 99%; overflow to "hosted" unless a pod makes it with that confidence; ${PII_SHARE * 100}% of prompts carry an e-mail address (PII) and must stay.`,
    );
    console.log(
      `Tenant "batch" sends ${BATCH_SHARE * 100}% of the requests with an overflow budget of ${BATCH_BUDGET_TOKENS} tokens per hour; once it is spent, its requests wait for a pod (3 s at most), then get 429.`,
    );
    console.log(`Load ramps to 1.7x local capacity and back over ${durationS}s.\n`);

    const summary = new Summary();
    const inFlight = new Set<Promise<void>>();
    const t0 = performance.now();
    let nextArrival = t0;
    let lastPrint = t0;
    let printedUpTo = 0;
    while (!stop.signal.aborted) {
      const now = performance.now();
      const fraction = (now - t0) / (durationS * 1000);
      if (fraction >= 1) break;
      const rate = loadAt(fraction) * capacity;
      while (nextArrival <= now) {
        const p = sendOne(agent.apiUrl, rand, summary, stop.signal, rate > capacity).finally(() => inFlight.delete(p));
        inFlight.add(p);
        nextArrival += (-Math.log(1 - rand()) / rate) * 1000;
      }
      if (now - lastPrint >= 1000) {
        lastPrint = now;
        console.log(summary.line(Math.round((now - t0) / 1000), rate, summary.outcomes.slice(printedUpTo)));
        printedUpTo = summary.outcomes.length;
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(1, Math.min(50, nextArrival - performance.now()))));
    }
    // Let requests already sent finish (bounded), so the totals count them.
    await Promise.race([Promise.allSettled([...inFlight]), new Promise((resolve) => setTimeout(resolve, 10_000))]);
    console.log(`\n${summary.final()}`);
    return 0;
  } finally {
    stop.abort();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    for (const s of started.reverse()) await s.close().catch(() => {});
  }
}
