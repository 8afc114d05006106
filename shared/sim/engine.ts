// A model server's engine, simulated: continuous batching over a discrete-event timeline.
//
// Pure: time comes from an injected clock and randomness from a seeded generator; nothing here
// touches a timer or a socket. Two ways to drive it:
//   - real time: `RealtimeDriver` (driver.ts) sets a timer for `nextEventTime()` and calls
//     `advanceTo(clock.now())`; this is what the HTTP server uses.
//   - virtual time: a benchmark owns a `VirtualClock`; to deliver a request at time t it calls
//     `clock.set(t)`, `engine.advanceTo(t)` (for every pod), then `submit(...)`. Between arrivals
//     it may step pods to their `nextEventTime()`. Minutes of traffic run in milliseconds.
// Scheduling and step costs are described in latency.ts.

import type { SimClock } from './clock.ts';
import { realClock } from './clock.ts';
import { Histogram, type HistogramSnapshot } from './histogram.ts';
import { BUCKETS, type BucketLayout, type LatencyHistogram } from './buckets.ts';
import { DEFAULT_LATENCY, stepDurationMs, type LatencyParams } from './latency.ts';
import { mulberry32, type Rand } from './random.ts';
import { chainedBlockHashes, PrefixCache } from './prefix-cache.ts';

export type FinishReason = 'stop' | 'length' | 'abort';
export type SeqKind = 'generate' | 'embed';

export interface SimEngineOptions {
  /** Most requests in the running batch (vLLM --max-num-seqs). Default 16. */
  maxSeqs?: number;
  /** Most requests waiting beyond the free slots; a submit past it is rejected (HTTP 429). Default 512. */
  maxQueue?: number;
  /** Throughput multiplier: 0.5 = every duration doubled. Default 1. */
  speed?: number;
  /** Seed for jitter and sampled output lengths. Default 1. */
  seed?: number;
  /** KV-cache capacity in tokens (rounded down to whole blocks). Default 65,536. */
  kvCapacityTokens?: number;
  /** KV-cache block size in tokens. Default 16. */
  blockSize?: number;
  /** Automatic prefix caching (vLLM --enable-prefix-caching) for requests that carry `tokens`. Default true. */
  prefixCaching?: boolean;
  /** Token budget of one step (vLLM --max-num-batched-tokens). Default 2,048. */
  maxBatchedTokens?: number;
  /** Mean sampled output length when a request gives no max_tokens. Default 128. */
  meanOutputTokens?: number;
  /** Window for the generation-throughput gauge. Default 5,000 ms. */
  throughputWindowMs?: number;
  latency?: Partial<LatencyParams>;
  /** Histogram bounds; default vLLM's. */
  buckets?: BucketLayout;
  /**
   * Called once per scheduler step with the prefix-cache changes of that step, in order, as vLLM
   * gathers them into one KVEventBatch (--kv-events-config); not called for a step without any.
   */
  onKvEvents?: (events: SimKvEvent[], at: number) => void;
  /** LoRA adapter slots on the GPU (vLLM --max-loras): a batch holds at most this many distinct adapters. 0: no LoRA. */
  maxLoras?: number;
  /** Time to load an adapter into a free or evicted slot, added to the step that first runs it. Default 40 ms. */
  loraLoadMs?: number;
}

/** LoRA activity as vLLM's lora_requests_info reports it: one entry per label set seen, with when it was last set. */
export interface LoraSnapshot {
  maxLoras: number;
  /** Adapters of the running and waiting requests now (vLLM order: first seen first). */
  running: string[];
  waiting: string[];
  /** Adapters loaded on the GPU now, least recently used first. */
  resident: string[];
  /** Every (running, waiting) pair reported so far with its last time (s since the epoch, as vLLM's gauge value). */
  history: { running: string; waiting: string; at: number }[];
  /** Adapter loads so far (each a swap into a slot). */
  loads: number;
}

/** A prefix-cache change, as vLLM's BlockStored / BlockRemoved / AllBlocksCleared say it. */
export type SimKvEvent =
  | { type: 'stored'; hashes: number[]; parent: number | undefined; tokens: number[]; blockSize: number }
  | { type: 'removed'; hashes: number[] }
  | { type: 'cleared' };

export interface SimRequest {
  promptTokens: number;
  /** Exact output length; the request then finishes with "length". Without it, a seeded length ending in "stop". */
  maxTokens?: number;
  /** Ceiling for a sampled length (the context window left); reaching it finishes with "length". */
  capTokens?: number;
  /** `embed`: a prefill only, no tokens. Default `generate`. */
  kind?: SeqKind;
  /**
   * The prompt's token ids. With them, full blocks already cached from an earlier prompt with the
   * same prefix are not computed again; without them, nothing is cached (every token is prefilled).
   */
  tokens?: ArrayLike<number>;
  /**
   * The token ids this request will generate (a stand-in model's answer). With them, full blocks
   * of output are cached too, as vLLM V1 does, so a next turn resending this answer hits them.
   */
  outputTokens?: ArrayLike<number>;
  /** A LoRA adapter's name: the request runs with it, and waits while the batch holds maxLoras others. */
  adapter?: string;
}

export interface SeqOutcome {
  id: number;
  finishReason: FinishReason;
  promptTokens: number;
  outputTokens: number;
  arrivedAt: number;
  scheduledAt?: number;
  firstTokenAt?: number;
  finishedAt: number;
  /** Prompt tokens found in the prefix cache when it was scheduled (not computed again). */
  cachedTokens: number;
}

/** Called synchronously while the engine advances; they may submit or abort. */
export interface SeqEvents {
  /** A token was produced; `generated` counts them (1 = first token). */
  onToken?(at: number, generated: number): void;
  onDone?(at: number, outcome: SeqOutcome): void;
}

export interface SeqHandle {
  readonly id: number;
  /** Tokens the request will produce unless aborted (0 for embeddings). */
  readonly targetTokens: number;
  /** How it will end unless aborted. */
  readonly finishReason: 'stop' | 'length';
  /** Stops the request where it is and frees its slot and KV cache. Idempotent. */
  abort(): void;
}

export type SubmitResult =
  { accepted: true; seq: SeqHandle } | { accepted: false; reason: 'queue-full' | 'too-large'; message: string };

export interface EngineCounters {
  received: number;
  rejected: number;
  promptTokens: number;
  generationTokens: number;
  preemptions: number;
  /** Prompt tokens looked up in the prefix cache (vLLM's prefix_cache_queries). */
  prefixQueries: number;
  /** Of those, tokens found cached and not computed again (vLLM's prefix_cache_hits). */
  prefixHits: number;
  finished: Record<FinishReason, number>;
}

export interface EngineSnapshot {
  /** Engine time (ms) of this snapshot. */
  at: number;
  waiting: number;
  running: number;
  /** KV-cache use, 0..1, in whole blocks as vLLM counts it. */
  kvCache: number;
  kvUsedTokens: number;
  kvCapacityTokens: number;
  blockSize: number;
  maxSeqs: number;
  /** Prompt + planned output tokens of the running batch (TGI's batch_current_max_tokens). */
  batchMaxTokens: number;
  /** Generated tokens per second over the throughput window. */
  genThroughput: number;
  /** Total time spent in steps (ms). */
  busyMs: number;
  /** Blocks cached but held by no running request: reusable, evicted first-released-first when space is short. */
  prefixCachedBlocks: number;
  /**
   * Of the latest step that prefilled, the share of its requests' prompt tokens the prefix cache
   * served: cached prefixes of the requests it admitted over those plus the tokens it computed
   * (SGLang's cache_hit_rate, set per prefill batch). 0 before any prefill.
   */
  lastPrefillHitRate: number;
  /** Present when the engine serves LoRA adapters (maxLoras > 0). */
  lora?: LoraSnapshot;
  counters: EngineCounters;
  histograms: Record<LatencyHistogram, HistogramSnapshot>;
}

interface Seq {
  id: number;
  kind: SeqKind;
  promptTokens: number;
  targetTokens: number;
  endReason: 'stop' | 'length';
  events: SeqEvents;
  state: 'waiting' | 'running' | 'done';
  arrivedAt: number;
  scheduledAt?: number;
  firstTokenAt?: number;
  lastTokenAt?: number;
  /** Tokens to prefill before the next token: the prompt, or prompt + output after a preemption. */
  prefillTarget: number;
  computed: number;
  generated: number;
  /** Tokens held in the KV cache. */
  held: number;
  /** Chained hashes of the prompt's full blocks (empty without token ids or prefix caching). */
  blockHashes: number[];
  /** The token ids those hashes cover (prompt, then output), for the KV events. */
  tokenIds: ArrayLike<number> | undefined;
  /** Leading blocks of `held` that are shared prefix-cache blocks rather than this request's own. */
  sharedBlocks: number;
  /** Prompt tokens found cached when it was first scheduled. */
  hitTokens: number;
  /** This step's share: prefill chunk size, or 1 for a decode. */
  chunk: number;
  prefilling: boolean;
  adapter?: string;
}

interface Step {
  endsAt: number;
  work: Seq[];
}

const HISTOGRAMS: readonly LatencyHistogram[] = [
  'ttft',
  'itl',
  'e2e',
  'queue',
  'prefill',
  'decode',
  'inference',
  'tpot',
];

export class SimEngine {
  readonly maxSeqs: number;
  readonly maxQueue: number;
  readonly blockSize: number;
  readonly numBlocks: number;
  readonly maxBatchedTokens: number;
  readonly latency: LatencyParams;
  #speed: number;
  readonly #meanOutput: number;
  readonly #windowMs: number;
  readonly #clock: SimClock;
  readonly #rand: Rand;
  readonly #prefix: PrefixCache | undefined;
  readonly #onKvEvents: SimEngineOptions['onKvEvents'];
  /** This step's prefix-cache changes, published together when it has been scheduled. */
  #kvEvents: SimKvEvent[] = [];
  readonly #maxLoras: number;
  readonly #loraLoadMs: number;
  /** Adapters loaded on the GPU, least recently used first (at most maxLoras). */
  #resident: string[] = [];
  #loraLoads = 0;
  /** lora_requests_info label sets seen → last time set (bounded: the oldest go first). */
  readonly #loraHistory = new Map<string, { running: string; waiting: string; at: number }>();

  #time = 0;
  #nextId = 1;
  #waiting: Seq[] = [];
  #running: Seq[] = [];
  /** Blocks held by running requests: their own plus the cached blocks they reference (vLLM's usage). */
  #usedBlocks = 0;
  #step: Step | undefined;
  #inAdvance = false;
  #busyMs = 0;
  #lastPrefillHitRate = 0;
  #wake: (() => void) | undefined;
  // Generated tokens per step inside the throughput window: parallel arrays, oldest first.
  #tpAt: number[] = [];
  #tpTokens: number[] = [];
  #tpSum = 0;

  readonly #counters: EngineCounters = {
    received: 0,
    rejected: 0,
    promptTokens: 0,
    generationTokens: 0,
    preemptions: 0,
    prefixQueries: 0,
    prefixHits: 0,
    finished: { stop: 0, length: 0, abort: 0 },
  };
  readonly #hist: Record<LatencyHistogram, Histogram>;

  constructor(opts: SimEngineOptions = {}, clock: SimClock = realClock) {
    this.maxSeqs = positiveInt(opts.maxSeqs ?? 16, 'maxSeqs');
    this.maxQueue = nonNegativeInt(opts.maxQueue ?? 512, 'maxQueue');
    this.blockSize = positiveInt(opts.blockSize ?? 16, 'blockSize');
    this.numBlocks = Math.floor((opts.kvCapacityTokens ?? 65_536) / this.blockSize);
    if (this.numBlocks < 1) throw new RangeError('kvCapacityTokens must hold at least one block');
    this.maxBatchedTokens = positiveInt(opts.maxBatchedTokens ?? 2048, 'maxBatchedTokens');
    this.#meanOutput = positiveInt(opts.meanOutputTokens ?? 128, 'meanOutputTokens');
    this.#windowMs = opts.throughputWindowMs ?? 5000;
    this.#speed = positive(opts.speed ?? 1, 'speed');
    this.latency = { ...DEFAULT_LATENCY, ...opts.latency };
    this.#clock = clock;
    this.#rand = mulberry32(opts.seed ?? 1);
    this.#onKvEvents = opts.onKvEvents;
    this.#prefix =
      (opts.prefixCaching ?? true)
        ? new PrefixCache(this.#onKvEvents ? (hash) => this.#noteRemoved(hash) : undefined)
        : undefined;
    this.#maxLoras = nonNegativeInt(opts.maxLoras ?? 0, 'maxLoras');
    this.#loraLoadMs = opts.loraLoadMs ?? 40;
    this.#time = clock.now();
    const layout = opts.buckets ?? BUCKETS.vllm;
    this.#hist = Object.fromEntries(HISTOGRAMS.map((name) => [name, new Histogram(layout[name])])) as Record<
      LatencyHistogram,
      Histogram
    >;
  }

  get speed(): number {
    return this.#speed;
  }

  /** Changes throughput from the next step on (a pod that slows down mid-run). */
  setSpeed(speed: number): void {
    this.#speed = positive(speed, 'speed');
  }

  /** Engine time (ms): the latest instant it has processed. */
  get time(): number {
    return this.#time;
  }

  /** Capacity in tokens of the KV cache. */
  get kvCapacityTokens(): number {
    return this.numBlocks * this.blockSize;
  }

  /** Called when a step starts outside `advanceTo`, so a real-time driver can re-arm its timer. */
  setWakeListener(fn: (() => void) | undefined): void {
    this.#wake = fn;
  }

  /** When the step in flight ends; undefined when idle. */
  nextEventTime(): number | undefined {
    return this.#step?.endsAt;
  }

  submit(req: SimRequest, events: SeqEvents = {}): SubmitResult {
    const at = this.#sync();
    this.#counters.received++;
    const kind = req.kind ?? 'generate';
    const promptTokens = Math.max(1, Math.ceil(req.promptTokens));
    const capacity = this.kvCapacityTokens;
    if (promptTokens + (kind === 'embed' ? 0 : 1) > capacity) {
      this.#counters.rejected++;
      const message = `prompt of ${promptTokens} tokens does not fit a KV cache of ${capacity} tokens`;
      return { accepted: false, reason: 'too-large', message };
    }
    // maxQueue bounds the requests that must wait for a slot; those the free slots will take don't count.
    const freeSlots = Math.max(0, this.maxSeqs - this.#running.length);
    if (this.#waiting.length >= this.maxQueue + freeSlots) {
      this.#counters.rejected++;
      const message = `the server is overloaded: ${this.#waiting.length} requests waiting`;
      return { accepted: false, reason: 'queue-full', message };
    }

    let targetTokens = 0;
    let endReason: 'stop' | 'length' = 'stop';
    if (kind === 'generate') {
      if (req.maxTokens !== undefined) {
        targetTokens = Math.max(1, Math.floor(req.maxTokens));
        endReason = 'length';
      } else {
        targetTokens = Math.max(1, Math.round(this.#meanOutput * (0.5 + this.#rand())));
      }
      // A sequence must fit the KV cache alone, or it would preempt itself forever.
      const cap = Math.min(capacity - promptTokens, req.capTokens ?? Infinity);
      if (targetTokens > cap) {
        targetTokens = Math.max(1, Math.floor(cap));
        endReason = 'length';
      }
    }

    const seq: Seq = {
      id: this.#nextId++,
      kind,
      promptTokens,
      targetTokens,
      endReason,
      events,
      state: 'waiting',
      arrivedAt: at,
      prefillTarget: promptTokens,
      computed: 0,
      generated: 0,
      held: 0,
      blockHashes:
        this.#prefix && req.tokens && kind === 'generate' ? this.#hashes(req, promptTokens, targetTokens) : [],
      tokenIds: this.#onKvEvents && req.tokens ? tokenIdsOf(req, promptTokens) : undefined,
      sharedBlocks: 0,
      hitTokens: 0,
      chunk: 0,
      prefilling: false,
      ...(req.adapter !== undefined && this.#maxLoras > 0 ? { adapter: req.adapter } : {}),
    };
    this.#waiting.push(seq);
    if (!this.#step && !this.#inAdvance) {
      this.#startStep(at);
      this.#wake?.();
    }
    const handle: SeqHandle = {
      id: seq.id,
      targetTokens,
      finishReason: endReason,
      abort: () => this.#abort(seq),
    };
    return { accepted: true, seq: handle };
  }

  /**
   * Prompt tokens of `tokens` this engine's prefix cache holds right now (full blocks, from the
   * start): the truth an exact-cache oracle routes on, which no real router can see.
   */
  cachedPrefixTokens(tokens: ArrayLike<number>): number {
    if (!this.#prefix) return 0;
    return this.#prefix.match(chainedBlockHashes(tokens, this.blockSize)) * this.blockSize;
  }

  /** Processes every step that ends at or before `t`. */
  advanceTo(t: number): void {
    if (this.#inAdvance) return; // called from a callback: the outer loop carries on
    this.#inAdvance = true;
    try {
      while (this.#step && this.#step.endsAt <= t) {
        const step = this.#step;
        this.#step = undefined;
        this.#time = step.endsAt;
        this.#completeStep(step);
        this.#startStep(step.endsAt);
      }
      if (t > this.#time) this.#time = t;
    } finally {
      this.#inAdvance = false;
    }
  }

  /** Virtual time: runs steps until nothing is left. Returns the engine time when idle. */
  runUntilIdle(): number {
    for (let next = this.nextEventTime(); next !== undefined; next = this.nextEventTime()) {
      this.advanceTo(next);
    }
    return this.#time;
  }

  snapshot(): EngineSnapshot {
    const at = this.#sync();
    this.#pruneThroughput(at);
    let batchMaxTokens = 0;
    for (const seq of this.#running) batchMaxTokens += seq.promptTokens + seq.targetTokens;
    const c = this.#counters;
    return {
      at,
      waiting: this.#waiting.length,
      running: this.#running.length,
      kvCache: this.#usedBlocks / this.numBlocks,
      kvUsedTokens: this.#usedBlocks * this.blockSize,
      kvCapacityTokens: this.kvCapacityTokens,
      blockSize: this.blockSize,
      maxSeqs: this.maxSeqs,
      batchMaxTokens,
      genThroughput: this.#tpSum / (this.#windowMs / 1000),
      busyMs: this.#busyMs,
      prefixCachedBlocks: this.#prefix?.evictable ?? 0,
      lastPrefillHitRate: this.#lastPrefillHitRate,
      ...(this.#maxLoras > 0 ? { lora: this.#loraSnapshot() } : {}),
      counters: { ...c, finished: { ...c.finished } },
      histograms: Object.fromEntries(HISTOGRAMS.map((name) => [name, this.#hist[name].snapshot()])) as Record<
        LatencyHistogram,
        HistogramSnapshot
      >,
    };
  }

  /** Brings the engine up to the clock, unless it is already advancing (then: its current time). */
  #sync(): number {
    if (!this.#inAdvance) this.advanceTo(Math.max(this.#clock.now(), this.#time));
    return this.#time;
  }

  #startStep(at: number): void {
    const work: Seq[] = [];
    let budget = this.maxBatchedTokens;
    let decodes = 0;
    let prefillTokens = 0;
    let contextTokens = 0;
    let admittedHitTokens = 0;
    // Decodes not yet scheduled this step: a prefill chunk leaves one token of budget for each.
    let decodesAhead = this.#running.filter((s) => !isPrefilling(s)).length;

    for (let i = 0; i < this.#running.length && budget > 0; i++) {
      const seq = this.#running[i];
      const prefilling = isPrefilling(seq);
      if (!prefilling) decodesAhead--;
      const want = prefilling ? Math.min(seq.prefillTarget - seq.computed, Math.max(1, budget - decodesAhead)) : 1;
      if (!this.#reserve(seq, want)) break; // it was the last in line and got preempted
      seq.chunk = want;
      seq.prefilling = prefilling;
      budget -= want;
      work.push(seq);
      if (prefilling) prefillTokens += want;
      else {
        decodes++;
        contextTokens += seq.held;
      }
    }

    // LoRA (vLLM V1's scheduler): a request whose adapter would be one too many in the batch is
    // skipped, and the requests behind it may go first.
    const batchAdapters = this.#maxLoras > 0 ? this.#activeAdapters() : undefined;
    let loadMs = 0;
    for (let w = 0; w < this.#waiting.length && this.#running.length < this.maxSeqs && budget > 0;) {
      const seq = this.#waiting[w];
      if (batchAdapters && seq.adapter !== undefined && !batchAdapters.has(seq.adapter)) {
        if (batchAdapters.size >= this.#maxLoras) {
          w++;
          continue;
        }
      }
      const hit = this.#cachedPrefixBlocks(seq);
      const want = Math.min(seq.prefillTarget - hit * this.blockSize, budget);
      // First come, first served: the head waits for KV rather than being overtaken.
      if (this.#blocks(hit * this.blockSize + want) > this.numBlocks - this.#usedBlocks) break;
      this.#waiting.splice(w, 1);
      if (batchAdapters && seq.adapter !== undefined) {
        batchAdapters.add(seq.adapter);
        if (this.#useAdapter(seq.adapter, batchAdapters)) loadMs += this.#loraLoadMs;
      }
      this.#running.push(seq);
      seq.state = 'running';
      if (seq.scheduledAt === undefined) {
        seq.hitTokens = hit * this.blockSize;
        admittedHitTokens += seq.hitTokens;
      }
      seq.scheduledAt ??= at;
      this.#acquirePrefix(seq, hit);
      this.#setHeld(seq, seq.held + want);
      seq.chunk = want;
      seq.prefilling = true;
      budget -= want;
      work.push(seq);
      prefillTokens += want;
    }

    if (work.length === 0) {
      if (this.#maxLoras > 0) this.#noteLora(at);
      this.#flushKvEvents(at);
      return; // idle
    }
    if (prefillTokens > 0) this.#lastPrefillHitRate = admittedHitTokens / (admittedHitTokens + prefillTokens);
    const cost = stepDurationMs(
      { decodes, prefillTokens, contextTokens, running: this.#running.length, maxSeqs: this.maxSeqs },
      this.latency,
      this.#speed,
      this.#rand(),
    );
    this.#busyMs += cost + loadMs;
    this.#step = { endsAt: at + cost + loadMs, work };
    this.#flushKvEvents(at);
    if (this.#maxLoras > 0) this.#noteLora(at);
  }

  /** Adapters of the running batch. */
  #activeAdapters(): Set<string> {
    const active = new Set<string>();
    for (const seq of this.#running) if (seq.adapter !== undefined) active.add(seq.adapter);
    return active;
  }

  /** Marks `adapter` used now; true when it had to be loaded (evicting the least recently used idle one). */
  #useAdapter(adapter: string, active: ReadonlySet<string>): boolean {
    const at = this.#resident.indexOf(adapter);
    if (at >= 0) {
      this.#resident.splice(at, 1);
      this.#resident.push(adapter);
      return false;
    }
    if (this.#resident.length >= this.#maxLoras) {
      const victim = this.#resident.findIndex((a) => !active.has(a) || a === adapter);
      this.#resident.splice(victim >= 0 ? victim : 0, 1);
    }
    this.#resident.push(adapter);
    this.#loraLoads++;
    return true;
  }

  /** Records the lora_requests_info label set now, as vLLM does on each scheduler step. */
  #noteLora(at: number): void {
    const names = (seqs: Seq[]) =>
      [...new Set(seqs.flatMap((s) => (s.adapter === undefined ? [] : [s.adapter])))].join(',');
    const running = names(this.#running);
    const waiting = names(this.#waiting);
    const key = `${running}|${waiting}`;
    this.#loraHistory.delete(key);
    this.#loraHistory.set(key, { running, waiting, at: at / 1000 });
    if (this.#loraHistory.size > 256) this.#loraHistory.delete(this.#loraHistory.keys().next().value!);
  }

  #loraSnapshot(): LoraSnapshot {
    const split = (list: string) => (list === '' ? [] : list.split(','));
    const latest = [...this.#loraHistory.values()].at(-1);
    return {
      maxLoras: this.#maxLoras,
      running: split(latest?.running ?? ''),
      waiting: split(latest?.waiting ?? ''),
      resident: [...this.#resident],
      history: [...this.#loraHistory.values()],
      loads: this.#loraLoads,
    };
  }

  #completeStep(step: Step): void {
    const at = step.endsAt;
    let tokens = 0;
    for (const seq of step.work) {
      if (seq.state !== 'running') continue; // aborted during the step
      if (seq.prefilling) seq.computed += seq.chunk;
      this.#shareComputedBlocks(seq);
      if (seq.prefilling) {
        if (seq.computed < seq.prefillTarget) continue;
        if (seq.generated === 0) {
          this.#counters.promptTokens += seq.promptTokens;
          this.#counters.prefixQueries += seq.promptTokens;
          this.#counters.prefixHits += seq.hitTokens;
        }
        if (seq.kind === 'embed') {
          this.#finish(seq, 'stop', at);
          continue;
        }
      }
      tokens++;
      this.#emitToken(seq, at);
    }
    if (tokens > 0) {
      this.#tpAt.push(at);
      this.#tpTokens.push(tokens);
      this.#tpSum += tokens;
    }
    this.#pruneThroughput(at);
  }

  #emitToken(seq: Seq, at: number): void {
    seq.generated++;
    this.#counters.generationTokens++;
    if (seq.generated === 1) {
      seq.firstTokenAt = at;
      this.#hist.ttft.observe((at - seq.arrivedAt) / 1000);
    } else {
      this.#hist.itl.observe((at - (seq.lastTokenAt ?? at)) / 1000);
    }
    seq.lastTokenAt = at;
    seq.events.onToken?.(at, seq.generated);
    if (seq.state === 'running' && seq.generated >= seq.targetTokens) {
      this.#finish(seq, seq.endReason, at);
    }
  }

  #finish(seq: Seq, reason: FinishReason, at: number): void {
    if (seq.state === 'running') this.#running.splice(this.#running.indexOf(seq), 1);
    else if (seq.state === 'waiting') this.#waiting.splice(this.#waiting.indexOf(seq), 1);
    else return;
    this.#releaseAll(seq);
    seq.state = 'done';
    this.#counters.finished[reason]++;
    if (reason !== 'abort') this.#observeFinished(seq, at);
    seq.events.onDone?.(at, {
      id: seq.id,
      finishReason: reason,
      promptTokens: seq.promptTokens,
      outputTokens: seq.generated,
      arrivedAt: seq.arrivedAt,
      scheduledAt: seq.scheduledAt,
      firstTokenAt: seq.firstTokenAt,
      cachedTokens: seq.hitTokens,
      finishedAt: at,
    });
  }

  #observeFinished(seq: Seq, at: number): void {
    const s = (ms: number) => ms / 1000;
    const scheduled = seq.scheduledAt ?? at;
    this.#hist.e2e.observe(s(at - seq.arrivedAt));
    this.#hist.queue.observe(s(scheduled - seq.arrivedAt));
    this.#hist.inference.observe(s(at - scheduled));
    const first = seq.firstTokenAt;
    if (first === undefined) {
      this.#hist.prefill.observe(s(at - scheduled)); // an embedding is all prefill
      return;
    }
    this.#hist.prefill.observe(s(first - scheduled));
    this.#hist.decode.observe(s(at - first));
    if (seq.generated > 1) this.#hist.tpot.observe(s((at - first) / (seq.generated - 1)));
  }

  #abort(seq: Seq): void {
    if (seq.state === 'done') return;
    const at = this.#sync(); // it may have finished before now
    if ((seq.state as Seq['state']) === 'done') return;
    this.#finish(seq, 'abort', at);
  }

  /** Grows `seq`'s KV by `tokens`, preempting from the back of the batch; false if `seq` itself went. */
  #reserve(seq: Seq, tokens: number): boolean {
    const extra = this.#blocks(seq.held + tokens) - this.#blocks(seq.held);
    while (extra > this.numBlocks - this.#usedBlocks) {
      const victim = this.#running[this.#running.length - 1];
      this.#preempt(victim);
      if (victim === seq) return false;
    }
    this.#setHeld(seq, seq.held + tokens);
    return true;
  }

  /** vLLM's recompute preemption: drop the KV, requeue at the front, prefill prompt + output again. */
  #preempt(seq: Seq): void {
    this.#running.splice(this.#running.indexOf(seq), 1);
    this.#releaseAll(seq);
    seq.state = 'waiting';
    seq.computed = 0;
    seq.prefillTarget = seq.promptTokens + seq.generated;
    this.#waiting.unshift(seq);
    this.#counters.preemptions++;
  }

  /** Sets the tokens `seq` holds; its own blocks are those past its shared prefix blocks. */
  #setHeld(seq: Seq, tokens: number): void {
    this.#usedBlocks += this.#blocks(tokens) - this.#blocks(seq.held);
    seq.held = tokens;
    this.#evictForSpace();
  }

  /**
   * Full prompt blocks a waiting request would find cached. At least one prompt token is always
   * computed (the step that produces the first token needs it), as in vLLM.
   */
  #cachedPrefixBlocks(seq: Seq): number {
    if (!this.#prefix || seq.blockHashes.length === 0 || seq.computed > 0) return 0;
    return this.#prefix.match(seq.blockHashes, Math.floor((seq.promptTokens - 1) / this.blockSize));
  }

  /** A request being scheduled takes its `hit` cached blocks as already computed. */
  #acquirePrefix(seq: Seq, hit: number): void {
    if (hit === 0 || !this.#prefix) return;
    for (let i = 0; i < hit; i++) this.#usedBlocks += this.#prefix.acquire(seq.blockHashes[i]);
    seq.sharedBlocks = hit;
    seq.held = hit * this.blockSize;
    seq.computed = seq.held;
  }

  /** Block hashes over the prompt, then over the output when its ids are known. */
  #hashes(req: SimRequest, promptTokens: number, targetTokens: number): number[] {
    const tokens = req.tokens!;
    if (!req.outputTokens || tokens.length < promptTokens)
      return chainedBlockHashes(tokens, this.blockSize, promptTokens);
    const all = [...Array.from(tokens).slice(0, promptTokens), ...Array.from(req.outputTokens)];
    return chainedBlockHashes(all, this.blockSize, promptTokens + targetTokens);
  }

  /**
   * Full blocks whose KV `seq` has just computed (at the end of a step, all it holds: prompt
   * chunks, and each decode's input token) join the cache, for later requests with the same prefix.
   */
  #shareComputedBlocks(seq: Seq): void {
    const prefix = this.#prefix;
    if (!prefix) return;
    // Consecutive new blocks of one request go in one BlockStored, chained to the block before.
    let stored: Extract<SimKvEvent, { type: 'stored' }> | undefined;
    while (seq.sharedBlocks < seq.blockHashes.length && (seq.sharedBlocks + 1) * this.blockSize <= seq.held) {
      const i = seq.sharedBlocks;
      const hash = seq.blockHashes[i];
      const fresh = seq.tokenIds !== undefined && !prefix.has(hash);
      // Its own block becomes the cached one, or is dropped for a copy already cached.
      this.#usedBlocks += prefix.acquire(hash) - 1;
      seq.sharedBlocks++;
      if (!fresh) {
        stored = undefined;
        continue;
      }
      if (!stored) {
        const parent = i > 0 ? seq.blockHashes[i - 1] : undefined;
        stored = { type: 'stored', hashes: [], parent, tokens: [], blockSize: this.blockSize };
        this.#kvEvents.push(stored);
      }
      stored.hashes.push(hash);
      for (let t = i * this.blockSize; t < (i + 1) * this.blockSize; t++) stored.tokens.push(seq.tokenIds![t]);
    }
  }

  #noteRemoved(hash: number): void {
    const last = this.#kvEvents[this.#kvEvents.length - 1];
    if (last?.type === 'removed') last.hashes.push(hash);
    else this.#kvEvents.push({ type: 'removed', hashes: [hash] });
  }

  #flushKvEvents(at: number): void {
    if (this.#kvEvents.length === 0) return;
    const events = this.#kvEvents;
    this.#kvEvents = [];
    this.#onKvEvents?.(events, at);
  }

  /** Frees `seq`'s own blocks and lets go of its cached ones, last block first so it is evicted first. */
  #releaseAll(seq: Seq): void {
    this.#usedBlocks -= this.#blocks(seq.held) - seq.sharedBlocks;
    for (let i = seq.sharedBlocks - 1; i >= 0; i--) this.#usedBlocks -= this.#prefix!.release(seq.blockHashes[i]);
    seq.sharedBlocks = 0;
    seq.held = 0;
  }

  /** Unreferenced cached blocks live in the free space; they go once running requests need it. */
  #evictForSpace(): void {
    const prefix = this.#prefix;
    if (!prefix) return;
    while (this.#usedBlocks + prefix.evictable > this.numBlocks && prefix.evictOne());
  }

  #blocks(tokens: number): number {
    return Math.ceil(tokens / this.blockSize);
  }

  #pruneThroughput(at: number): void {
    while (this.#tpAt.length > 0 && this.#tpAt[0] <= at - this.#windowMs) {
      this.#tpAt.shift();
      this.#tpSum -= this.#tpTokens.shift() ?? 0;
    }
  }
}

/** The ids a request's block hashes cover: its prompt, then its answer when known. */
function tokenIdsOf(req: SimRequest, promptTokens: number): ArrayLike<number> {
  const tokens = req.tokens!;
  if (!req.outputTokens || tokens.length < promptTokens) return tokens;
  return [...Array.from(tokens).slice(0, promptTokens), ...Array.from(req.outputTokens)];
}

function isPrefilling(seq: Seq): boolean {
  return seq.computed < seq.prefillTarget;
}

function positive(n: number, name: string): number {
  if (!(n > 0) || !Number.isFinite(n)) throw new RangeError(`${name} must be a positive number`);
  return n;
}

function positiveInt(n: number, name: string): number {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`${name} must be a positive integer`);
  return n;
}

function nonNegativeInt(n: number, name: string): number {
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`${name} must be a non-negative integer`);
  return n;
}
