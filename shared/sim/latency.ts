// The latency model: how long one engine step (one forward pass over the running batch) takes.
//
// The engine works like vLLM's V1 scheduler: every step runs one forward pass that decodes one
// token for each running request that has finished its prefill, and prefills a chunk of each
// request that has not, within a budget of `maxBatchedTokens` tokens: running requests in
// admission order (a prefill chunk leaves room for the decodes behind it), then requests admitted
// from the FIFO queue while there is a free slot, budget and KV cache. A step costs
//
//   step = ( stepBaseMs
//          + decodeMsPerSeq · decodes
//          + decodeMsPerKContext · contextTokens / 1000
//          + prefillMsPerToken · prefillTokens · (1 + prefillBatchSlowdown · running / maxSeqs)
//          ) · jitter / speed
//
// with `jitter` uniform in [1 - jitterFrac, 1 + jitterFrac] from the seeded generator. So:
//   - inter-token latency at batch b ≈ stepBaseMs + decodeMsPerSeq · b  (15 ms at b = 1, 39 ms at 16);
//   - TTFT = queue wait + the steps that prefill the prompt; alone, a P-token prompt takes about
//     stepBaseMs + 0.25 ms · P, and a full batch makes it up to 1.5× slower and adds its decodes;
//   - a prefill sharing a step with decodes stretches that step: the decode stall real engines show.
// Defaults look like an 8B model in bf16 on one data-center GPU.

export interface LatencyParams {
  /** Fixed cost of a forward pass: launch, scheduling, sampling. */
  stepBaseMs: number;
  /** Added per request decoded in the step. */
  decodeMsPerSeq: number;
  /** Added per 1,000 tokens of context (KV) read by the step's decodes: attention cost. */
  decodeMsPerKContext: number;
  /** Prefill cost per prompt token at an empty batch. */
  prefillMsPerToken: number;
  /** A prefill at a full batch runs (1 + this) times slower. */
  prefillBatchSlowdown: number;
  /** Relative half-width of the per-step random jitter (0 = none). */
  jitterFrac: number;
}

export const DEFAULT_LATENCY: LatencyParams = {
  stepBaseMs: 13.4,
  decodeMsPerSeq: 1.6,
  decodeMsPerKContext: 0.05,
  prefillMsPerToken: 0.25,
  prefillBatchSlowdown: 0.5,
  jitterFrac: 0.05,
};

/** What one step computes. */
export interface StepWork {
  decodes: number;
  prefillTokens: number;
  /** Tokens held in KV by the requests decoded this step. */
  contextTokens: number;
  /** Requests in the running batch (decoding or prefilling). */
  running: number;
  maxSeqs: number;
}

/** Step duration in ms before jitter and speed. */
export function stepCostMs(work: StepWork, p: LatencyParams): number {
  const fill = work.maxSeqs > 0 ? work.running / work.maxSeqs : 0;
  return (
    p.stepBaseMs +
    p.decodeMsPerSeq * work.decodes +
    (p.decodeMsPerKContext * work.contextTokens) / 1000 +
    p.prefillMsPerToken * work.prefillTokens * (1 + p.prefillBatchSlowdown * fill)
  );
}

/** Step duration in ms: cost, jittered by `u` (uniform [0,1)), divided by `speed`. */
export function stepDurationMs(work: StepWork, p: LatencyParams, speed: number, u: number): number {
  const jitter = 1 + p.jitterFrac * (2 * u - 1);
  // A floor keeps a zero-cost configuration from spinning the event loop at one instant.
  return Math.max(0.001, (stepCostMs(work, p) * jitter) / speed);
}
