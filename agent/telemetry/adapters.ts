// Engine adapters: one parsed /metrics page → one engine-neutral `PodLoad`.
//
// Each adapter names the samples it reads (its selector, so the parser skips the rest) and how to
// fold label sets into one pod-level number. Names checked against the engines' sources:
// vLLM v1/metrics/loggers.py, TGI docs/source/reference/metrics.md, SGLang srt/metrics/collector.py.

import { LORA_INFO, LORA_LABELS, loraStateOf } from './lora.ts';
import type { Engine, PodLoad } from '../types.ts';
import { MetricSelector, type MetricPage, type Series } from './metric-page.ts';

export type LoadResult = { ok: true; load: PodLoad } | { ok: false; error: string };

export interface EngineAdapter {
  readonly engine: Engine;
  /** The samples `toLoad` reads. */
  readonly selector: MetricSelector;
  /** Name whose presence identifies the engine (for detection). */
  readonly signature: string;
  /**
   * Where the engine's server answers `?name[]=…` with only the samples named (prometheus_client),
   * for a filtered scrape of the selector's names; absent when it ignores the query (TGI).
   */
  readonly filteredPath?: string;
  toLoad(page: MetricPage, at: number): LoadResult;
}

function histogramNames(family: string): string[] {
  return [`${family}_sum`, `${family}_count`];
}

/**
 * Every family an adapter names, histograms (`_sum` and `_count` only) expanded; `labels`: the
 * label names `toLoad` reads (no others are kept on the page).
 */
function everyFamily(
  names: Record<string, string>,
  histograms: readonly string[],
  labels: readonly string[],
): MetricSelector {
  return new MetricSelector(
    Object.values(names).flatMap((name) => (histograms.includes(name) ? histogramNames(name) : [name])),
    [],
    labels,
  );
}

/** A histogram's `_sum` and `_count` (names given whole: no string built per scrape). */
function totals(sum: number | undefined, count: number | undefined): { sum: number; count: number } | undefined {
  return sum === undefined || count === undefined ? undefined : { sum, count };
}

function missing(engine: Engine, name: string): LoadResult {
  return { ok: false, error: `${engine} page has no ${name}` };
}

/** Copies the defined optional fields onto the load; absent is different from zero. */
function withOptional(
  load: PodLoad,
  extra: Pick<
    PodLoad,
    | 'promptTokens'
    | 'generationTokens'
    | 'finished'
    | 'prefixCacheQueries'
    | 'prefixCacheHits'
    | 'prefixCacheHitRate'
    | 'kvCapacityTokens'
    | 'lora'
  > & { ttft?: { sum: number; count: number }; queueTime?: { sum: number; count: number } },
): PodLoad {
  if (extra.ttft) {
    load.ttftSum = extra.ttft.sum;
    load.ttftCount = extra.ttft.count;
  }
  if (extra.queueTime) {
    load.queueTimeSum = extra.queueTime.sum;
    load.queueTimeCount = extra.queueTime.count;
  }
  if (extra.promptTokens !== undefined) load.promptTokens = extra.promptTokens;
  if (extra.generationTokens !== undefined) load.generationTokens = extra.generationTokens;
  if (extra.finished !== undefined) load.finished = extra.finished;
  if (extra.prefixCacheQueries !== undefined && extra.prefixCacheHits !== undefined) {
    load.prefixCacheQueries = extra.prefixCacheQueries;
    load.prefixCacheHits = extra.prefixCacheHits;
  }
  const rate = extra.prefixCacheHitRate;
  if (rate !== undefined && rate >= 0 && rate <= 1) load.prefixCacheHitRate = rate;
  if (extra.kvCapacityTokens !== undefined && extra.kvCapacityTokens > 0)
    load.kvCapacityTokens = extra.kvCapacityTokens;
  if (extra.lora) load.lora = extra.lora;
  return load;
}

// ── Filtered scrapes ─────────────────────────────────────────────────────────────────────────────
// prometheus_client (vLLM's and SGLang's /metrics) renders only the samples a request names with
// `name[]` (sample names, `_sum`/`_count`/`_total` included; absent names are ignored; see
// shared/sim/name-filter.ts for where each fact was read). Where the server honours it, a vLLM V1
// page shrinks from ~45 KB to ~2 KB. Where it does not, the page is whole and read as before, or empty
// or partial, which the scraper detects and answers with an unfiltered scrape (scraper.ts):
//   - vLLM: the exact path `/metrics` is prometheus-fastapi-instrumentator's handler
//     (`generate_latest(registry)`, no query read), registered before prometheus_client's
//     `make_asgi_app`, which is mounted for `^/metrics(.*)$` (vllm/entrypoints/serve/instrumentator/
//     metrics.py; earlier vllm/v1/metrics/prometheus.py `mount_metrics`). So the filtered path is
//     `/metrics/`. With one API server the registry is the default one and the filter is honoured;
//     with several, it is a plain `CollectorRegistry()` around a MultiProcessCollector, which
//     registers no names: the filtered page is empty.
//   - SGLang: `make_asgi_app` of a plain registry around a MultiProcessCollector, mounted the same
//     way (python/sglang/srt/utils/common.py `add_prometheus_middleware`): empty today, honoured
//     once the registry is built with `support_collectors_without_names=True` (prometheus_client
//     ≥ 0.25.0).
//   - TGI: axum's `/metrics` handler renders the whole page whatever the query
//     (router/src/server.rs `metrics`), so it is never asked.

// ── vLLM ─────────────────────────────────────────────────────────────────────────────────────────
// Series carry `engine` (data-parallel index) and `model_name`; a pod is the sum of its engines.

const VLLM = {
  waiting: 'vllm:num_requests_waiting',
  running: 'vllm:num_requests_running',
  kv: 'vllm:kv_cache_usage_perc',
  kvBefore09: 'vllm:gpu_cache_usage_perc',
  ttft: 'vllm:time_to_first_token_seconds',
  queueTime: 'vllm:request_queue_time_seconds',
  promptTokens: 'vllm:prompt_tokens_total',
  generationTokens: 'vllm:generation_tokens_total',
  finished: 'vllm:request_success_total',
  prefixQueries: 'vllm:prefix_cache_queries_total',
  prefixHits: 'vllm:prefix_cache_hits_total',
  cacheConfig: 'vllm:cache_config_info',
  lora: LORA_INFO,
} as const;

const VLLM_TTFT = histogramNames(VLLM.ttft);
const VLLM_QUEUE_TIME = histogramNames(VLLM.queueTime);

/** KV capacity in tokens: each engine's num_gpu_blocks × block_size, summed (labels of an info gauge). */
function vllmKvCapacity(page: MetricPage): number | undefined {
  let total: number | undefined;
  for (const s of page.series(VLLM.cacheConfig)) {
    const tokens = Number(s.labels.num_gpu_blocks) * Number(s.labels.block_size);
    if (Number.isFinite(tokens)) total = (total ?? 0) + tokens;
  }
  return total;
}

export const vllmAdapter: EngineAdapter = {
  engine: 'vllm',
  signature: VLLM.waiting,
  filteredPath: '/metrics/',
  selector: everyFamily(VLLM, [VLLM.ttft, VLLM.queueTime], ['num_gpu_blocks', 'block_size', ...LORA_LABELS]),
  toLoad(page, at) {
    const waiting = page.sum(VLLM.waiting);
    const running = page.sum(VLLM.running);
    if (waiting === undefined) return missing('vllm', VLLM.waiting);
    if (running === undefined) return missing('vllm', VLLM.running);
    // Engines are equal-sized replicas, so their mean is the pod's share of KV capacity used.
    // Versions around 0.9–0.10 emit both names; the newer one wins.
    const kvCache = page.mean(VLLM.kv) ?? page.mean(VLLM.kvBefore09) ?? NaN;
    const lora = loraStateOf(page.series(VLLM.lora));
    return {
      ok: true,
      load: withOptional(
        { at, engine: 'vllm', waiting, running, kvCache },
        {
          ttft: totals(page.sum(VLLM_TTFT[0]), page.sum(VLLM_TTFT[1])),
          queueTime: totals(page.sum(VLLM_QUEUE_TIME[0]), page.sum(VLLM_QUEUE_TIME[1])),
          promptTokens: page.sum(VLLM.promptTokens),
          generationTokens: page.sum(VLLM.generationTokens),
          finished: page.sum(VLLM.finished), // over finished_reason (stop, length, abort, …) and engines
          prefixCacheQueries: page.sum(VLLM.prefixQueries),
          prefixCacheHits: page.sum(VLLM.prefixHits),
          kvCapacityTokens: vllmKvCapacity(page),
          lora,
        },
      ),
    };
  },
};

// ── TGI ──────────────────────────────────────────────────────────────────────────────────────────
// Rust `metrics` exporter: no `_total` on counters, no KV gauge, no TTFT histogram. Token counts
// only exist as per-request histograms, whose `_sum` is the cumulative token count.

const TGI = {
  waiting: 'tgi_queue_size',
  running: 'tgi_batch_current_size',
  queueTime: 'tgi_request_queue_duration',
  inputLength: 'tgi_request_input_length',
  generatedTokens: 'tgi_request_generated_tokens',
  finished: 'tgi_request_success',
} as const;

const TGI_QUEUE_TIME = histogramNames(TGI.queueTime);

export const tgiAdapter: EngineAdapter = {
  engine: 'tgi',
  signature: TGI.waiting,
  selector: new MetricSelector(
    [
      TGI.waiting,
      TGI.running,
      ...histogramNames(TGI.queueTime),
      `${TGI.inputLength}_sum`,
      `${TGI.generatedTokens}_sum`,
      TGI.finished,
      `${TGI.finished}_total`,
    ],
    [],
    [], // every number is summed over its series
  ),
  toLoad(page, at) {
    const waiting = page.sum(TGI.waiting);
    const running = page.sum(TGI.running);
    if (waiting === undefined) return missing('tgi', TGI.waiting);
    if (running === undefined) return missing('tgi', TGI.running);
    return {
      ok: true,
      load: withOptional(
        { at, engine: 'tgi', waiting, running, kvCache: NaN },
        {
          queueTime: totals(page.sum(TGI_QUEUE_TIME[0]), page.sum(TGI_QUEUE_TIME[1])),
          promptTokens: page.sum(`${TGI.inputLength}_sum`),
          generationTokens: page.sum(`${TGI.generatedTokens}_sum`),
          finished: page.sum(TGI.finished) ?? page.sum(`${TGI.finished}_total`),
        },
      ),
    };
  },
};

// ── SGLang ───────────────────────────────────────────────────────────────────────────────────────
// Scheduler gauges are written by every rank (`tp_rank`, `pp_rank`, optionally `dp_rank`). Tensor-
// parallel ranks share one scheduler state, so they repeat the same queue: take one rank per
// data-parallel group and add the groups up.

const SGLANG = {
  waiting: 'sglang:num_queue_reqs',
  running: 'sglang:num_running_reqs',
  kv: 'sglang:token_usage',
  ttft: 'sglang:time_to_first_token_seconds',
  queueTime: 'sglang:queue_time_seconds',
  promptTokens: 'sglang:prompt_tokens_total',
  generationTokens: 'sglang:generation_tokens_total',
  finished: 'sglang:num_requests_total',
  cacheHitRate: 'sglang:cache_hit_rate',
  kvCapacity: 'sglang:max_total_num_tokens',
} as const;

function rankOf(series: Series, label: string): number {
  const raw = series.labels[label];
  const n = raw === undefined ? NaN : Number(raw);
  return Number.isNaN(n) ? Infinity : n;
}

/**
 * One representative per data-parallel group: the series at the lowest (tp_rank, pp_rank).
 * A group without rank labels is kept whole (per-process totals, e.g. the tokenizer's counters).
 */
export function onePerDpGroup(series: readonly Series[]): Series[] {
  const groups = new Map<string, Series[]>();
  for (const s of series) {
    const key = s.labels.dp_rank ?? '';
    const members = groups.get(key);
    if (members === undefined) groups.set(key, [s]);
    else members.push(s);
  }
  const picked: Series[] = [];
  for (const members of groups.values()) {
    if (!members.some((s) => s.labels.tp_rank !== undefined)) {
      picked.push(...members);
      continue;
    }
    let best = members[0];
    for (const s of members) {
      const tp = rankOf(s, 'tp_rank') - rankOf(best, 'tp_rank');
      if (tp < 0 || (tp === 0 && rankOf(s, 'pp_rank') < rankOf(best, 'pp_rank'))) best = s;
    }
    picked.push(best);
  }
  return picked;
}

/** How many series the last `sumOnePerDpGroup` picked. */
let picked = 0;

/**
 * The sum of `onePerDpGroup(series)`'s values, in its order (sets `picked`). Pages without
 * data-parallel groups (the usual case) are folded without building the groups.
 */
function sumOnePerDpGroup(series: readonly Series[]): number {
  let ranked = false;
  for (let k = 0; k < series.length; k++) {
    const s = series[k];
    if (s.labels.dp_rank !== undefined) {
      const groups = onePerDpGroup(series);
      picked = groups.length;
      return groups.reduce((total, g) => total + g.value, 0);
    }
    if (s.labels.tp_rank !== undefined) ranked = true;
  }
  if (!ranked) {
    let total = 0;
    for (let k = 0; k < series.length; k++) total += series[k].value;
    picked = series.length;
    return total;
  }
  let best = series[0];
  for (let k = 0; k < series.length; k++) {
    const s = series[k];
    const tp = rankOf(s, 'tp_rank') - rankOf(best, 'tp_rank');
    if (tp < 0 || (tp === 0 && rankOf(s, 'pp_rank') < rankOf(best, 'pp_rank'))) best = s;
  }
  picked = 1;
  return 0 + best.value;
}

function sumRanks(page: MetricPage, name: string): number | undefined {
  const total = sumOnePerDpGroup(page.series(name));
  return picked === 0 ? undefined : total;
}

function meanRanks(page: MetricPage, name: string): number | undefined {
  const total = sumOnePerDpGroup(page.series(name));
  return picked === 0 ? undefined : total / picked;
}

const SGLANG_TTFT = histogramNames(SGLANG.ttft);
const SGLANG_QUEUE_TIME = histogramNames(SGLANG.queueTime);

export const sglangAdapter: EngineAdapter = {
  engine: 'sglang',
  signature: SGLANG.waiting,
  filteredPath: '/metrics',
  selector: everyFamily(SGLANG, [SGLANG.ttft, SGLANG.queueTime], ['dp_rank', 'tp_rank', 'pp_rank']),
  toLoad(page, at) {
    const waiting = sumRanks(page, SGLANG.waiting);
    const running = sumRanks(page, SGLANG.running);
    if (waiting === undefined) return missing('sglang', SGLANG.waiting);
    if (running === undefined) return missing('sglang', SGLANG.running);
    return {
      ok: true,
      load: withOptional(
        { at, engine: 'sglang', waiting, running, kvCache: meanRanks(page, SGLANG.kv) ?? NaN },
        {
          ttft: totals(sumRanks(page, SGLANG_TTFT[0]), sumRanks(page, SGLANG_TTFT[1])),
          queueTime: totals(sumRanks(page, SGLANG_QUEUE_TIME[0]), sumRanks(page, SGLANG_QUEUE_TIME[1])),
          promptTokens: sumRanks(page, SGLANG.promptTokens),
          generationTokens: sumRanks(page, SGLANG.generationTokens),
          finished: sumRanks(page, SGLANG.finished),
          // A ratio, not counters: the interval's hits are estimated from it (pod-telemetry.ts).
          prefixCacheHitRate: meanRanks(page, SGLANG.cacheHitRate),
          // Tensor-parallel ranks share one pool: one per data-parallel group, summed.
          kvCapacityTokens: sumRanks(page, SGLANG.kvCapacity),
        },
      ),
    };
  },
};

// ── Choosing an adapter ──────────────────────────────────────────────────────────────────────────

export const ADAPTERS: Readonly<Record<Engine, EngineAdapter>> = {
  vllm: vllmAdapter,
  tgi: tgiAdapter,
  sglang: sglangAdapter,
};

/** Every adapter's samples: parse an unknown pod's page once with this, detect, then adapt. */
export const ANY_ENGINE_SELECTOR = MetricSelector.union(
  vllmAdapter.selector,
  tgiAdapter.selector,
  sglangAdapter.selector,
);

/** The engine whose signature gauge is on the page; undefined when none or several are. */
export function detectEngine(page: MetricPage): Engine | undefined {
  const found = Object.values(ADAPTERS).filter((a) => page.has(a.signature));
  return found.length === 1 ? found[0].engine : undefined;
}

/** Adapt with the given engine, or detect it first. */
export function toPodLoad(page: MetricPage, at: number, engine?: Engine): LoadResult {
  const chosen = engine ?? detectEngine(page);
  if (chosen === undefined)
    return { ok: false, error: 'cannot tell the engine from the page (no vLLM, TGI or SGLang queue gauge)' };
  return ADAPTERS[chosen].toLoad(page, at);
}

/**
 * The request target of a filtered scrape for `adapter` (its selector's sample names as `name[]`,
 * percent-encoded as Prometheus itself sends scrape `params`), or undefined when its server has none.
 */
export function filteredTarget(adapter: EngineAdapter): string | undefined {
  if (adapter.filteredPath === undefined) return undefined;
  const query = adapter.selector.names().map((name) => `name%5B%5D=${encodeURIComponent(name)}`);
  return `${adapter.filteredPath}?${query.join('&')}`;
}
