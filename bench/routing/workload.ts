// Recorded arrivals: generated once per scenario from a seed, then replayed identically to every
// strategy, so differences between strategies are the strategies' and not the dice's.
import { mulberry32 } from '../../shared/sim/random.ts';

/**
 * Text a client would have sent for these token ids, 4 characters per id, so the agent's
 * character-based blocks (agent/prefix/blocks.ts) line up with the pods' 16-token blocks. Real
 * tokenizers don't align like this; here the router-side index is as accurate as it can be.
 */
export function promptTextOf(tokens: readonly number[]): string {
  let text = '';
  for (const id of tokens) text += id.toString(36).padStart(4, '0');
  return text;
}

export interface Arrival {
  at: number;
  promptTokens: number;
  maxTokens: number;
  /** Index of the pod it goes to directly (traffic the agent never sees); undefined: via the agent. */
  direct?: number;
  /** The prompt's token ids, for the pods' prefix caches (prefix-workloads.ts); absent: nothing cached. */
  tokens?: number[];
  /** The answer's token ids, so the pod caches its blocks too (a next turn resends it). */
  outputTokens?: number[];
}

export interface Phase {
  /** Length of the phase (ms). */
  ms: number;
  /** Arrival rate through the agent, as a fraction of the pool's total capacity. */
  load: number;
}

export interface PromptMix {
  /** Share of long prompts (4k–8k tokens); the rest are 50–1,500 tokens, skewed short. */
  longShare: number;
}

function promptTokens(rand: () => number, mix: PromptMix): number {
  if (rand() < mix.longShare) return 4000 + Math.floor(rand() * 4000);
  // Skewed toward short chat turns: median ~ 300 tokens.
  return 50 + Math.floor(1450 * rand() ** 2);
}

/** Poisson arrivals whose rate follows the phases. `capacityPerS` is the pool's requests/s at 100%. */
export function generateArrivals(seed: number, phases: Phase[], capacityPerS: number, mix: PromptMix): Arrival[] {
  const rand = mulberry32(seed);
  const out: Arrival[] = [];
  let start = 0;
  for (const phase of phases) {
    const rate = (phase.load * capacityPerS) / 1000;
    let t = start;
    for (;;) {
      t += -Math.log(1 - rand()) / rate;
      if (t >= start + phase.ms) break;
      out.push({ at: t, promptTokens: promptTokens(rand, mix), maxTokens: 32 + Math.floor(rand() * 192) });
    }
    start += phase.ms;
  }
  return out;
}

/** Traffic that goes straight to one pod at `ratePerS` (another agent, a direct client). */
export function generateDirect(seed: number, pod: number, ratePerS: number, fromMs: number, toMs: number): Arrival[] {
  const rand = mulberry32(seed);
  const out: Arrival[] = [];
  for (let t = fromMs; ;) {
    t += (-Math.log(1 - rand()) / ratePerS) * 1000;
    if (t >= toMs) break;
    out.push({
      at: t,
      promptTokens: promptTokens(rand, { longShare: 0 }),
      maxTokens: 32 + Math.floor(rand() * 192),
      direct: pod,
    });
  }
  return out;
}
