// The core data the agent's parts exchange. Plain data only: the pure core (classify, policy, predict, route)
// and the I/O shells (server, telemetry, forward, providers, gossip, cluster) exchange these.

import type { BudgetLimit, PriorityPolicy } from './budget/limits.ts';
import type { CalibrationSummary } from './predict/calibration-prior.ts';

export type Engine = 'vllm' | 'tgi' | 'sglang';
export const ENGINES: readonly Engine[] = ['vllm', 'tgi', 'sglang'];

/** A model-server pod, local or learned through gossip. */
export interface Pod {
  /** Stable identity: the Kubernetes uid, or `namespace/name` in static mode. */
  uid: string;
  name: string;
  namespace: string;
  /** Node the pod runs on (= the origin agent for gossip). */
  node: string;
  /** host:port of the model server's HTTP listener. */
  address: string;
  models: string[];
  /** Undefined until configured or detected from the first scrape. */
  engine?: Engine;
  /** Requests the server runs at once (vLLM --max-num-seqs …), when known: the connection cap. */
  maxConcurrency?: number;
  /** Where the pod publishes its KV-cache events (vLLM --kv-events-config), when it does. */
  kvEvents?: KvEventsEndpoint;
  /** LoRA adapters the server serves (also listed in `models`): a request naming one runs with it. */
  adapters?: string[];
}

/** A pod's KV-event sockets: the PUB endpoint, the replay (ROUTER) endpoint, the topic. */
export interface KvEventsEndpoint {
  endpoint: string;
  replayEndpoint?: string;
  topic?: string;
}

/** A pod's LoRA adapters as its metrics show them (vLLM's lora_requests_info; agent/telemetry/lora.ts). */
export interface LoraState {
  /** GPU adapter slots (--max-loras): a batch holds at most this many distinct adapters. */
  maxLora: number;
  /** Adapters of the requests running, and waiting, now. */
  running: string[];
  waiting: string[];
  /** Adapters holding a GPU slot, most recently used first (rebuilt from the gauge's history). */
  resident: string[];
}

/** One parsed scrape of a model server's /metrics, engine-neutral. */
export interface PodLoad {
  /** Clock time (ms) when the scrape completed. */
  at: number;
  engine: Engine;
  /** Requests waiting for a slot in the running batch. */
  waiting: number;
  /** Requests in the running batch. */
  running: number;
  /** KV-cache use, 0..1; NaN when the engine does not report it. */
  kvCache: number;
  /** Cumulative TTFT histogram sum (s) and count; absent for engines without one (TGI). */
  ttftSum?: number;
  ttftCount?: number;
  /** Cumulative queue-time histogram sum (s) and count. */
  queueTimeSum?: number;
  queueTimeCount?: number;
  /** Cumulative token and request counters. */
  promptTokens?: number;
  generationTokens?: number;
  finished?: number;
  /** Cumulative prompt tokens looked up in the prefix cache, and of those found cached (vLLM's
   *  prefix_cache_queries/hits). */
  prefixCacheQueries?: number;
  prefixCacheHits?: number;
  /** Share of recent prompt tokens served from the prefix cache (SGLang's cache_hit_rate, 0..1). */
  prefixCacheHitRate?: number;
  /** KV-cache capacity in tokens (vLLM: num_gpu_blocks × block_size; SGLang: max_total_num_tokens). */
  kvCapacityTokens?: number;
  /** LoRA adapters (vLLM with --enable-lora). */
  lora?: LoraState;
}

/**
 * The per-pod latency model's parameters: predicted TTFT (ms) =
 *   base + perQueued·queued + perRunning·running + perKPromptTokens·(promptTokens/1000)
 *        + perKPendingTokens·(pendingPromptTokens/1000).
 * Gossiped as-is, so a remote agent predicts for any prompt size without a second model.
 */
export interface PredictorParams {
  base: number;
  perQueued: number;
  perRunning: number;
  perKPromptTokens: number;
  /** Per 1,000 prompt tokens this agent has sent to the pod that still await their first token. */
  perKPendingTokens?: number;
}

/** What an agent knows, and gossips, about one pod. */
export interface PodEstimate {
  pod: Pod;
  /** Queue length averaged over the agent's reference window. */
  queued: number;
  /** Queue length at the last scrape. */
  queuedNow: number;
  running: number;
  kvCache: number;
  params: PredictorParams;
  /** Origin's clock (ms) when this estimate was produced. */
  at: number;
  origin: string;
  version: number;
  /**
   * A Bloom filter of the pod's hottest cached prefixes (agent/prefix/summary.ts), from its KV-cache
   * events; absent when its agent does not follow them. Lets other nodes send a long shared context
   * to the pod that holds it.
   */
  prefixSummary?: Uint8Array;
  /** The pod's LoRA slots (vLLM with --enable-lora): gossiped so other nodes send an adapter where it is loaded. */
  lora?: LoraState;
  /**
   * Its agent's calibration of the pod's prediction errors (agent/predict/calibration-prior.ts):
   * a receiver's prior for the pod's margin. Only from the pod's own node's agent.
   */
  calibration?: CalibrationSummary;
}

/** Everything the router needs to know about one request; built by the ingress shell. */
export interface RouteRequest {
  kind: RequestKind;
  model: string;
  tenant: string;
  namespace: string;
  tags: readonly string[];
  promptTokens: number;
  stream: boolean;
  /** The most the answer may take (max_tokens / max_completion_tokens / max_output_tokens), when the client set it. */
  maxTokens?: number;
  /** Chained hashes of the prompt's blocks (agent/prefix/blocks.ts), computed once per request. */
  promptBlocks?: readonly number[];
  /** The prompt's token ids from the model's own tokenizer, where one is configured (the precise index's key). */
  promptTokenIds?: readonly number[];
}

export type RequestKind = 'chat' | 'completions' | 'embeddings' | 'responses' | 'messages';

/** Where each kind is served under an OpenAI-compatible base (`/v1` at pods, the endpoint at providers). */
export const API_PATHS: Readonly<Record<RequestKind, string>> = {
  chat: 'chat/completions',
  completions: 'completions',
  embeddings: 'embeddings',
  responses: 'responses',
  // The Anthropic Messages API, which vLLM and SGLang serve at /v1/messages.
  messages: 'messages',
};

export type ExcludeMetric = 'queued' | 'running' | 'kvCache' | 'predictedTTFT';

export interface ExcludeRule {
  metric: ExcludeMetric;
  above: number;
  windowMs: number;
}

/** The policy that applies to one request, after resolution and namespace annotations. */
/** Requests that finished a phase between two scrapes, from a cumulative histogram's sum/count. */
export interface MeanDelta {
  count: number;
  /** Seconds. */
  sum: number;
  /** Seconds; NaN when no request finished in the interval. */
  mean: number;
}

/** What a pod's own counters say happened between two scrapes (telemetry computes it, predict learns from it). */
export interface IntervalDelta {
  /** Time between the two scrapes. */
  intervalMs: number;
  /** Mean TTFT of the requests whose first token came in the interval (engines with a TTFT histogram). */
  ttft?: MeanDelta;
  queueTime?: MeanDelta;
  finished?: number;
  promptTokens?: number;
  /** Prompt tokens the pod computed (not served from its prefix cache): vLLM's queries − hits,
   *  SGLang's prompt tokens × (1 − cache_hit_rate); absent without prefix-cache metrics. */
  computedPromptTokens?: number;
  generationTokens?: number;
}

/** An OpenAI-compatible request as the API listener parsed it: which API, its JSON body, model and streaming. */
export interface ParsedRequest {
  kind: RequestKind;
  body: Record<string, unknown>;
  model: string;
  stream: boolean;
}

export interface EffectivePolicy {
  /** `namespace/name` of the InferencePolicy that matched, or `builtin/default`. */
  name: string;
  sloTtftMs: number;
  /** Share of requests that may leave which must meet the SLO (0..1): the quantile admission judges. */
  sloAttainment: number;
  exclude: ExcludeRule[];
  overflow: { providers: string[]; denyTags: string[]; denyTenants: string[] };
  waitMaxMs: number;
  /** Overflow limits per tenant (the policy's and the floor's; each holds). Absent: none. */
  budget?: readonly BudgetLimit[];
  /** Waiting order; absent: standard, header ignored. */
  priority?: PriorityPolicy;
}

/** Time (ms since the epoch) and randomness, injected so tests and benches drive them (defaults: Date.now, Math.random). */
export interface ClockAndRandom {
  now?: () => number;
  rand?: () => number;
}

/** Session affinity (agent/server/request-path/sessions.ts): where a session's key comes from and how many are kept. */
export interface SessionSettings {
  header: string;
  /** Also take the key from the body's `user` / `metadata.user_id` when the header is absent. */
  fromBody: boolean;
  maxSessions: number;
  ttlMs: number;
}
