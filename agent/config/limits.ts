// The agent's limits (`limits:` in the config file): every bound and timer the agent enforces, its
// schema, its defaults (most are the owning domain's own constants) and the settings in ms.
import { Type, type Static } from '@sinclair/typebox';
import { parseDuration } from '../../shared/duration.ts';
import { DEFAULT_LEDGER_LIMITS } from '../budget/ledger.ts';
import { DEFAULT_SCAN_LIMITS } from '../classify/walk.ts';
import { DEFAULT_PEER_SHORTLIST } from '../pool/pool.ts';
import { DEFAULT_LEAVABLE_BATCH_RESERVE } from '../pool/options.ts';
import { DEFAULT_PREFIX_MAX_BLOCKS } from '../prefix/blocks.ts';
import { DEFAULT_MAX_BLOCKS_PER_POD } from '../prefix/index.ts';
import { DEFAULT_LORA_COSTS } from '../route/lora.ts';
import { DurationString } from '../../shared/config-schema.ts';

export const LimitsConfig = Type.Object(
  {
    /** Largest request body accepted (bytes); larger → 413. */
    maxBodyBytes: Type.Optional(Type.Integer({ minimum: 1024 })),
    /** Time to the upstream pod's response headers; past it the pod counts as failed (retry). */
    podConnectTimeout: Type.Optional(DurationString),
    /**
     * Time to a pod's answer for a non-streamed request: the engine sends headers only with the
     * whole answer, so the generation is the deadline, not the connection.
     */
    podResponseTimeout: Type.Optional(DurationString),
    /** Longest gap between two chunks of an upstream stream before it is cut. */
    podIdleTimeout: Type.Optional(DurationString),
    /** How many other pods a request may try after a pod fails before its first byte. */
    maxRetries: Type.Optional(Type.Integer({ minimum: 0, maximum: 10 })),
    /** A pod that refused or reset a connection before its first byte is out of decisions this long at first. */
    ejectionBase: Type.Optional(DurationString),
    /** Longest ejection: each one in a row doubles it up to this; a probe then readmits the pod. */
    ejectionMax: Type.Optional(DurationString),
    /** Time allowed for in-flight requests to finish after SIGTERM. */
    drainTimeout: Type.Optional(DurationString),
    /** Per-scrape timeout of a pod's /metrics. */
    scrapeTimeout: Type.Optional(DurationString),
    /** Requests waiting for a pod at once; beyond it new waiters get 429 at once. */
    maxWaiting: Type.Optional(Type.Integer({ minimum: 0 })),
    /** Peers' pods a decision considers per model: the fastest predicted when gossip last changed them. */
    peerShortlist: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
    /** Share of a pod's batch that requests which may leave leave free for must-stay ones. */
    leavableBatchReserve: Type.Optional(Type.Number({ minimum: 0, maximum: 0.9 })),
    /** Completion tokens an overflow reserves against its tenant's budget when the client set no max_tokens. */
    budgetCompletionEstimate: Type.Optional(Type.Integer({ minimum: 0 })),
    /** A new (or restarted) agent admits no budgeted overflow for this long unless it has heard the cluster's counters. */
    budgetWarmup: Type.Optional(DurationString),
    /** An agent gossip no longer sees: its unsettled reservations stop counting this long later. */
    budgetPendingTtl: Type.Optional(DurationString),
    /** Budget counters held over every agent (current windows); more are dropped and counted. */
    budgetMaxCounters: Type.Optional(Type.Integer({ minimum: 100 })),
    /** Agents (origins) whose budget counters are held. */
    budgetMaxOrigins: Type.Optional(Type.Integer({ minimum: 2 })),
    /** Classification reads at most this many characters of a body; the rest makes it `unscanned`. */
    classifyMaxChars: Type.Optional(Type.Integer({ minimum: 1024 })),
    /** Deepest JSON nesting classification reads; deeper values make the request `unscanned`. */
    classifyMaxDepth: Type.Optional(Type.Integer({ minimum: 4, maximum: 256 })),
    /** JSON values (strings, numbers, objects, arrays) classification visits; past it: `unscanned`. */
    classifyMaxValues: Type.Optional(Type.Integer({ minimum: 100 })),
    /** Distinct values a metric's `model` or `policy` label may take; the rest count as "other". */
    maxLabelValues: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
    /** Deepest nesting of arrays/objects accepted in a request body; deeper → 400. */
    maxJsonDepth: Type.Optional(Type.Integer({ minimum: 4, maximum: 1000 })),
    /** Request bodies of at least this many bytes are parsed and classified on a worker thread. */
    offloadBodyBytes: Type.Optional(Type.Integer({ minimum: 1024 })),
    /** Worker threads for large request bodies, started as needed; 0: every body on the event loop. */
    bodyWorkers: Type.Optional(Type.Integer({ minimum: 0, maximum: 16 })),
    /** Connections (= requests in flight) to one pod; a pod at the cap is skipped, not queued for. */
    maxConnectionsPerPod: Type.Optional(Type.Integer({ minimum: 1, maximum: 4096 })),
    /** Largest non-streamed answer read from a pod or provider; larger → 502. */
    maxUpstreamBodyBytes: Type.Optional(Type.Integer({ minimum: 1024 })),
    /** Longest silence inside a provider's answer body before it is cut. */
    providerIdleTimeout: Type.Optional(DurationString),
    /** At most one log line per pod per interval about failing scrapes. */
    scrapeFailureLogInterval: Type.Optional(DurationString),
    /** After a pod's filtered page lacked samples its whole page has, scrape it whole this long before asking filtered again. */
    scrapeFilterRetry: Type.Optional(DurationString),
    /** After serving requests, this long with none open → one memory-reducing GC; `0s` never. */
    releaseMemoryAfterIdle: Type.Optional(DurationString),
    /** The API listener's request head at most, request line included (bytes); larger → 431. */
    apiMaxHeaderBytes: Type.Optional(Type.Integer({ minimum: 1024, maximum: 1024 * 1024 })),
    /** Header fields per API request at most; more → 431. */
    apiMaxHeaders: Type.Optional(Type.Integer({ minimum: 8, maximum: 10_000 })),
    /** An API request's target (path and query) at most (bytes); longer → 414. */
    apiMaxTargetBytes: Type.Optional(Type.Integer({ minimum: 256, maximum: 1024 * 1024 })),
    /** From an API request's first byte to the end of its head; past it → 408 and the connection closes. */
    apiHeadersTimeout: Type.Optional(DurationString),
    /** From an API request's first byte to the end of its body; past it → 408; `0s`: none. */
    apiRequestTimeout: Type.Optional(DurationString),
    /** An idle kept-alive API connection closes after this long. */
    apiKeepAliveTimeout: Type.Optional(DurationString),
    /** Requests one API connection may carry, then it closes after its answer; 0: no limit. */
    apiMaxRequestsPerSocket: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
    /** Prompt blocks (64 characters each) hashed per request for the prefix index; the rest is not matched. */
    prefixMaxBlocks: Type.Optional(Type.Integer({ minimum: 1, maximum: 65_536 })),
    /** Prompt blocks the prefix index remembers per local pod (~190 bytes each). */
    prefixBlocksPerPod: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
    /** Blocks the precise (KV-event) index keeps per pod at most (~186 bytes each); the pod's KV capacity caps it too. */
    preciseBlocksPerPod: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
    /** How long a pod's KV-event replay may take before its index is rebuilt without it. */
    kvReplayTimeout: Type.Optional(DurationString),
    /** Live KV-event batches held per pod while a replay runs; past it the pod's index is rebuilt. */
    kvMaxHeldBatches: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000 })),
    /** What loading a LoRA adapter into a GPU slot adds to a pod's predicted TTFT. */
    loraLoad: Type.Optional(DurationString),
    /** What waiting for a LoRA slot adds when every slot serves other adapters' running requests. */
    loraSlotWait: Type.Optional(DurationString),
    /** How often each pod's /v1/models is read for the LoRA adapters it lists (unset or 0s: never). */
    adapterListInterval: Type.Optional(DurationString),
  },
  { additionalProperties: false },
);

type LimitsFile = Static<typeof LimitsConfig>;

export interface Limits {
  maxBodyBytes: number;
  podConnectTimeoutMs: number;
  podResponseTimeoutMs: number;
  podIdleTimeoutMs: number;
  maxRetries: number;
  /** A pod that failed before its first byte is out this long at first, doubling per repeat up to the max. */
  ejectionBaseMs: number;
  ejectionMaxMs: number;
  drainTimeoutMs: number;
  scrapeTimeoutMs: number;
  maxWaiting: number;
  peerShortlist: number;
  leavableBatchReserve: number;
  /** Completion tokens an overflow reserves against its tenant's budget when the client set no max_tokens. */
  budgetCompletionEstimate: number;
  /** The budget ledger's bounds and timings (agent/budget/ledger.ts). */
  budgetWarmupMs: number;
  budgetPendingTtlMs: number;
  budgetMaxCounters: number;
  budgetMaxOrigins: number;
  classifyMaxChars: number;
  classifyMaxDepth: number;
  classifyMaxValues: number;
  maxLabelValues: number;
  maxJsonDepth: number;
  /** Request bodies of at least this many bytes are parsed and classified on a worker thread. */
  offloadBodyBytes: number;
  /** Worker threads for large bodies (agent/server/bodies/body-offload.ts); 0: all on the event loop. */
  bodyWorkers: number;
  maxConnectionsPerPod: number;
  maxUpstreamBodyBytes: number;
  providerIdleTimeoutMs: number;
  scrapeFailureLogIntervalMs: number;
  /** A pod whose filtered page fell short is scraped whole this long (agent/telemetry/scraper.ts). */
  scrapeFilterRetryMs: number;
  /** 0: never (agent/memory/idle-release.ts). */
  releaseMemoryAfterIdleMs: number;
  prefixMaxBlocks: number;
  prefixBlocksPerPod: number;
  /** Blocks the precise (KV-event) index keeps per pod at most, below the pod's own KV capacity. */
  preciseBlocksPerPod: number;
  /** How long a KV-event replay may take before the pod's index is rebuilt without it. */
  kvReplayTimeoutMs: number;
  /** Live KV-event batches held per pod while a replay runs; past it the index is rebuilt. */
  kvMaxHeldBatches: number;
  loraLoadMs: number;
  loraSlotWaitMs: number;
  /** How often each pod's /v1/models is read for its LoRA adapters; 0: never. */
  adapterListIntervalMs: number;
  /** The API listener's HTTP/1.1 bounds and timers (node:http's, agent/server/listener/listener.ts). */
  apiMaxHeaderBytes: number;
  apiMaxHeaders: number;
  apiMaxTargetBytes: number;
  apiHeadersTimeoutMs: number;
  /** 0: none. */
  apiRequestTimeoutMs: number;
  apiKeepAliveTimeoutMs: number;
  /** 0: no limit. */
  apiMaxRequestsPerSocket: number;
}

export const DEFAULT_LIMITS: Limits = {
  maxBodyBytes: 4 * 1024 * 1024,
  podConnectTimeoutMs: 10_000,
  // Long: a 4k-token answer at 50 ms per token under load is over 3 minutes. A dead pod is still
  // caught at once (refused) or by undici's TCP connect timeout (10 s), not by this.
  podResponseTimeoutMs: 600_000,
  podIdleTimeoutMs: 120_000,
  maxRetries: 2,
  ejectionBaseMs: 1_000,
  ejectionMaxMs: 30_000,
  drainTimeoutMs: 25_000,
  scrapeTimeoutMs: 1_000,
  maxWaiting: 1_000,
  peerShortlist: DEFAULT_PEER_SHORTLIST,
  leavableBatchReserve: DEFAULT_LEAVABLE_BATCH_RESERVE,
  budgetCompletionEstimate: 1_024,
  budgetWarmupMs: DEFAULT_LEDGER_LIMITS.warmupMs,
  budgetPendingTtlMs: DEFAULT_LEDGER_LIMITS.pendingTtlMs,
  budgetMaxCounters: DEFAULT_LEDGER_LIMITS.maxCounters,
  budgetMaxOrigins: DEFAULT_LEDGER_LIMITS.maxOrigins,
  classifyMaxChars: DEFAULT_SCAN_LIMITS.maxChars,
  classifyMaxDepth: DEFAULT_SCAN_LIMITS.maxDepth,
  classifyMaxValues: DEFAULT_SCAN_LIMITS.maxNodes,
  maxLabelValues: 100,
  maxJsonDepth: 64,
  offloadBodyBytes: 128 * 1024,
  bodyWorkers: 1,
  maxConnectionsPerPod: 256,
  maxUpstreamBodyBytes: 32 * 1024 * 1024,
  providerIdleTimeoutMs: 60_000,
  scrapeFailureLogIntervalMs: 30_000,
  scrapeFilterRetryMs: 10 * 60_000,
  releaseMemoryAfterIdleMs: 10_000,
  prefixMaxBlocks: DEFAULT_PREFIX_MAX_BLOCKS,
  prefixBlocksPerPod: DEFAULT_MAX_BLOCKS_PER_POD,
  preciseBlocksPerPod: 65_536,
  kvReplayTimeoutMs: 2000,
  kvMaxHeldBatches: 10_000,
  loraLoadMs: DEFAULT_LORA_COSTS.loadMs,
  loraSlotWaitMs: DEFAULT_LORA_COSTS.slotWaitMs,
  // Off unless set: reading every pod's model list is traffic a pod without adapters has no use for.
  adapterListIntervalMs: 0,
  // node:http's own defaults (maxHeadersCount 2000 was a cut, here a refusal past it).
  apiMaxHeaderBytes: 16 * 1024,
  apiMaxHeaders: 2000,
  apiMaxTargetBytes: 8 * 1024,
  apiHeadersTimeoutMs: 60_000,
  apiRequestTimeoutMs: 300_000,
  apiKeepAliveTimeoutMs: 5_000,
  apiMaxRequestsPerSocket: 0,
};

/** The limits' settings: each from the file, else its default (scrapeTimeout: at least the scrape interval). */
export function limitsSettings(limits: LimitsFile, scrapeIntervalMs: number): Limits {
  return {
    maxBodyBytes: limits.maxBodyBytes ?? DEFAULT_LIMITS.maxBodyBytes,
    podConnectTimeoutMs: durationOr(limits.podConnectTimeout, DEFAULT_LIMITS.podConnectTimeoutMs),
    podResponseTimeoutMs: durationOr(limits.podResponseTimeout, DEFAULT_LIMITS.podResponseTimeoutMs),
    podIdleTimeoutMs: durationOr(limits.podIdleTimeout, DEFAULT_LIMITS.podIdleTimeoutMs),
    maxRetries: limits.maxRetries ?? DEFAULT_LIMITS.maxRetries,
    ejectionBaseMs: durationOr(limits.ejectionBase, DEFAULT_LIMITS.ejectionBaseMs),
    ejectionMaxMs: durationOr(limits.ejectionMax, DEFAULT_LIMITS.ejectionMaxMs),
    drainTimeoutMs: durationOr(limits.drainTimeout, DEFAULT_LIMITS.drainTimeoutMs),
    scrapeTimeoutMs: durationOr(limits.scrapeTimeout, Math.max(DEFAULT_LIMITS.scrapeTimeoutMs, scrapeIntervalMs)),
    maxWaiting: limits.maxWaiting ?? DEFAULT_LIMITS.maxWaiting,
    peerShortlist: limits.peerShortlist ?? DEFAULT_LIMITS.peerShortlist,
    leavableBatchReserve: limits.leavableBatchReserve ?? DEFAULT_LIMITS.leavableBatchReserve,
    budgetCompletionEstimate: limits.budgetCompletionEstimate ?? DEFAULT_LIMITS.budgetCompletionEstimate,
    budgetWarmupMs: durationOr(limits.budgetWarmup, DEFAULT_LIMITS.budgetWarmupMs),
    budgetPendingTtlMs: durationOr(limits.budgetPendingTtl, DEFAULT_LIMITS.budgetPendingTtlMs),
    budgetMaxCounters: limits.budgetMaxCounters ?? DEFAULT_LIMITS.budgetMaxCounters,
    budgetMaxOrigins: limits.budgetMaxOrigins ?? DEFAULT_LIMITS.budgetMaxOrigins,
    classifyMaxChars: limits.classifyMaxChars ?? DEFAULT_LIMITS.classifyMaxChars,
    classifyMaxDepth: limits.classifyMaxDepth ?? DEFAULT_LIMITS.classifyMaxDepth,
    classifyMaxValues: limits.classifyMaxValues ?? DEFAULT_LIMITS.classifyMaxValues,
    maxLabelValues: limits.maxLabelValues ?? DEFAULT_LIMITS.maxLabelValues,
    maxJsonDepth: limits.maxJsonDepth ?? DEFAULT_LIMITS.maxJsonDepth,
    offloadBodyBytes: limits.offloadBodyBytes ?? DEFAULT_LIMITS.offloadBodyBytes,
    bodyWorkers: limits.bodyWorkers ?? DEFAULT_LIMITS.bodyWorkers,
    maxConnectionsPerPod: limits.maxConnectionsPerPod ?? DEFAULT_LIMITS.maxConnectionsPerPod,
    maxUpstreamBodyBytes: limits.maxUpstreamBodyBytes ?? DEFAULT_LIMITS.maxUpstreamBodyBytes,
    providerIdleTimeoutMs: durationOr(limits.providerIdleTimeout, DEFAULT_LIMITS.providerIdleTimeoutMs),
    scrapeFailureLogIntervalMs: durationOr(limits.scrapeFailureLogInterval, DEFAULT_LIMITS.scrapeFailureLogIntervalMs),
    scrapeFilterRetryMs: durationOr(limits.scrapeFilterRetry, DEFAULT_LIMITS.scrapeFilterRetryMs),
    releaseMemoryAfterIdleMs: durationOr(limits.releaseMemoryAfterIdle, DEFAULT_LIMITS.releaseMemoryAfterIdleMs),
    prefixMaxBlocks: limits.prefixMaxBlocks ?? DEFAULT_LIMITS.prefixMaxBlocks,
    prefixBlocksPerPod: limits.prefixBlocksPerPod ?? DEFAULT_LIMITS.prefixBlocksPerPod,
    preciseBlocksPerPod: limits.preciseBlocksPerPod ?? DEFAULT_LIMITS.preciseBlocksPerPod,
    kvReplayTimeoutMs: durationOr(limits.kvReplayTimeout, DEFAULT_LIMITS.kvReplayTimeoutMs),
    kvMaxHeldBatches: limits.kvMaxHeldBatches ?? DEFAULT_LIMITS.kvMaxHeldBatches,
    loraLoadMs: durationOr(limits.loraLoad, DEFAULT_LIMITS.loraLoadMs),
    loraSlotWaitMs: durationOr(limits.loraSlotWait, DEFAULT_LIMITS.loraSlotWaitMs),
    adapterListIntervalMs: durationOr(limits.adapterListInterval, DEFAULT_LIMITS.adapterListIntervalMs),
    apiMaxHeaderBytes: limits.apiMaxHeaderBytes ?? DEFAULT_LIMITS.apiMaxHeaderBytes,
    apiMaxHeaders: limits.apiMaxHeaders ?? DEFAULT_LIMITS.apiMaxHeaders,
    apiMaxTargetBytes: limits.apiMaxTargetBytes ?? DEFAULT_LIMITS.apiMaxTargetBytes,
    apiHeadersTimeoutMs: durationOr(limits.apiHeadersTimeout, DEFAULT_LIMITS.apiHeadersTimeoutMs),
    apiRequestTimeoutMs: durationOr(limits.apiRequestTimeout, DEFAULT_LIMITS.apiRequestTimeoutMs),
    apiKeepAliveTimeoutMs: durationOr(limits.apiKeepAliveTimeout, DEFAULT_LIMITS.apiKeepAliveTimeoutMs),
    apiMaxRequestsPerSocket: limits.apiMaxRequestsPerSocket ?? DEFAULT_LIMITS.apiMaxRequestsPerSocket,
  };
}

/** A duration setting in ms, or its default when the file leaves it out. */
function durationOr(text: string | undefined, fallbackMs: number): number {
  return text ? parseDuration(text) : fallbackMs;
}
