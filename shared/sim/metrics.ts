// `/metrics` as vLLM (V1), TGI or SGLang would write it for the engine's state: the same family
// names, HELP texts, labels and histogram buckets (buckets.ts), so the agent's scrapers and
// engine adapters are tested against the real shapes. Pure: a snapshot in, text out.

import type { Flavor } from './buckets.ts';
import type { EngineSnapshot } from './engine.ts';
import { renderPython, renderRust, type Family, type Labels } from './prom-text.ts';

export interface MetricsContext {
  flavor: Flavor;
  /** The served model name (the first of `--served-model-name`). */
  modelName: string;
  /** Process start, epoch seconds: vLLM's `_created` values and process_start_time_seconds. */
  startedAt: number;
}

export function renderMetrics(snap: EngineSnapshot, ctx: MetricsContext): string {
  switch (ctx.flavor) {
    case 'vllm':
      return renderPython([...pythonProcessFamilies(snap, ctx), ...vllmFamilies(snap, ctx)], ctx.startedAt);
    case 'tgi':
      return renderRust(tgiFamilies(snap));
    case 'sglang':
      // Multiprocess mode: no `_created`, no per-process python_*/process_* families.
      return renderPython(sglangFamilies(snap, ctx));
  }
}

export function metricsContentType(flavor: Flavor): string {
  return flavor === 'tgi' ? 'text/plain; charset=utf-8' : 'text/plain; version=0.0.4; charset=utf-8';
}

const gauge = (name: string, help: string, labels: Labels, value: number): Family => ({
  type: 'gauge',
  name,
  help,
  series: [{ labels, value }],
});

const counter = (name: string, help: string, labels: Labels, value: number): Family => ({
  type: 'counter',
  name,
  help,
  series: [{ labels, value }],
});

function histogram(
  snap: EngineSnapshot,
  key: keyof EngineSnapshot['histograms'],
  name: string,
  help: string,
  labels: Labels,
): Family {
  return { type: 'histogram', name, help, series: [{ labels, hist: snap.histograms[key] }] };
}

// vllm/v1/metrics/loggers.py; counters are named without `_total` here (the client adds it).
function vllmFamilies(snap: EngineSnapshot, ctx: MetricsContext): Family[] {
  const l: Labels = { model_name: ctx.modelName, engine: '0' };
  const c = snap.counters;
  const finished: Record<string, number> = { ...c.finished, error: 0, repetition: 0 };
  return [
    gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', l, snap.running),
    gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', l, snap.waiting),
    gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', l, snap.kvCache),
    counter(
      'vllm:prefix_cache_queries',
      'Prefix cache queries, in terms of number of queried tokens.',
      l,
      c.prefixQueries,
    ),
    counter('vllm:prefix_cache_hits', 'Prefix cache hits, in terms of number of cached tokens.', l, c.prefixHits),
    counter('vllm:num_preemptions', 'Cumulative number of preemption from the engine.', l, c.preemptions),
    counter('vllm:prompt_tokens', 'Number of prefill tokens processed.', l, c.promptTokens),
    counter('vllm:generation_tokens', 'Number of generation tokens processed.', l, c.generationTokens),
    {
      type: 'counter',
      name: 'vllm:request_success',
      help: 'Count of successfully processed requests.',
      series: Object.entries(finished).map(([reason, value]) => ({
        labels: { ...l, finished_reason: reason },
        value,
      })),
    },
    histogram(snap, 'ttft', 'vllm:time_to_first_token_seconds', 'Histogram of time to first token in seconds.', l),
    histogram(snap, 'itl', 'vllm:inter_token_latency_seconds', 'Histogram of inter-token latency in seconds.', l),
    histogram(
      snap,
      'tpot',
      'vllm:request_time_per_output_token_seconds',
      'Histogram of time_per_output_token_seconds per request.',
      l,
    ),
    histogram(snap, 'e2e', 'vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.', l),
    histogram(
      snap,
      'queue',
      'vllm:request_queue_time_seconds',
      'Histogram of time spent in WAITING phase for request.',
      l,
    ),
    histogram(
      snap,
      'inference',
      'vllm:request_inference_time_seconds',
      'Histogram of time spent in RUNNING phase for request.',
      l,
    ),
    histogram(
      snap,
      'prefill',
      'vllm:request_prefill_time_seconds',
      'Histogram of time spent in PREFILL phase for request.',
      l,
    ),
    histogram(
      snap,
      'decode',
      'vllm:request_decode_time_seconds',
      'Histogram of time spent in DECODE phase for request.',
      l,
    ),
    gauge(
      'vllm:cache_config_info',
      'Information of the LLMEngine CacheConfig',
      {
        block_size: String(snap.blockSize),
        cache_dtype: 'auto',
        enable_prefix_caching: 'True',
        engine: '0',
        gpu_memory_utilization: '0.9',
        num_gpu_blocks: String(snap.kvCapacityTokens / snap.blockSize),
        prefix_caching_hash_algo: 'sha256',
      },
      1,
    ),
    ...(snap.lora ? [loraInfo(snap.lora)] : []),
  ];
}

/** vLLM's lora_requests_info: every label set it ever set, each valued with when it was last set. */
function loraInfo(lora: NonNullable<EngineSnapshot['lora']>): Family {
  return {
    type: 'gauge',
    name: 'vllm:lora_requests_info',
    help: 'Running stats on lora requests.',
    series: lora.history.map((h) => ({
      labels: { max_lora: String(lora.maxLoras), running_lora_adapters: h.running, waiting_lora_adapters: h.waiting },
      value: h.at,
    })),
  };
}

/** The default collectors of the Python client (GC, platform, process), with plausible values. */
function pythonProcessFamilies(snap: EngineSnapshot, ctx: MetricsContext): Family[] {
  const requests = snap.counters.received;
  const generations = (values: number[], name: string, help: string): Family => ({
    type: 'counter',
    name,
    help,
    noCreated: true,
    series: values.map((value, g) => ({ labels: { generation: String(g) }, value })),
  });
  return [
    generations(
      [18_321 + 41 * requests, 2_210 + 3 * requests, 613 + Math.floor(requests / 10)],
      'python_gc_objects_collected',
      'Objects collected during gc',
    ),
    generations([0, 0, 0], 'python_gc_objects_uncollectable', 'Uncollectable objects found during GC'),
    generations(
      [1_904 + 2 * requests, 172 + Math.floor(requests / 5), 9 + Math.floor(requests / 100)],
      'python_gc_collections',
      'Number of times this generation was collected',
    ),
    gauge(
      'python_info',
      'Python platform information',
      { implementation: 'CPython', major: '3', minor: '12', patchlevel: '11', version: '3.12.11' },
      1,
    ),
    gauge('process_virtual_memory_bytes', 'Virtual memory size in bytes.', {}, 38_412_976_128),
    gauge('process_resident_memory_bytes', 'Resident memory size in bytes.', {}, 2_871_132_160 + 4096 * requests),
    gauge(
      'process_start_time_seconds',
      'Start time of the process since unix epoch in seconds.',
      {},
      Math.floor(ctx.startedAt * 100) / 100,
    ),
    {
      ...counter(
        'process_cpu_seconds',
        'Total user and system CPU time spent in seconds.',
        {},
        31.4 + snap.busyMs / 900,
      ),
      noCreated: true,
    },
    gauge('process_open_fds', 'Number of open file descriptors.', {}, 71 + snap.running + snap.waiting),
    gauge('process_max_fds', 'Maximum number of open file descriptors.', {}, 1_048_576),
  ];
}

// text-generation-inference router/src/server.rs (metrics::describe_*)
function tgiFamilies(snap: EngineSnapshot): Family[] {
  const c = snap.counters;
  const families: Family[] = [
    counter('tgi_request_count', 'Total number of requests', {}, c.received),
    counter('tgi_request_success', 'Number of successful requests', {}, c.finished.stop + c.finished.length),
    gauge('tgi_queue_size', 'Current queue size', {}, snap.waiting),
    gauge('tgi_batch_current_size', 'Current batch size', {}, snap.running),
    gauge('tgi_batch_current_max_tokens', 'Maximum tokens for the current batch', {}, snap.batchMaxTokens),
    histogram(snap, 'e2e', 'tgi_request_duration', 'Total time spent processing the request', {}),
    histogram(snap, 'queue', 'tgi_request_queue_duration', 'Time spent in the queue per request', {}),
    histogram(snap, 'inference', 'tgi_request_inference_duration', 'Request inference duration', {}),
    histogram(snap, 'tpot', 'tgi_request_mean_time_per_token_duration', 'Mean time per token per request', {}),
  ];
  // The Rust exporter only shows a counter once something has incremented it.
  if (c.rejected > 0) {
    families.push(counter('tgi_request_failure', 'Number of failed requests', { err: 'overloaded' }, c.rejected));
  }
  return families;
}

// sglang/srt/metrics/collector.py: scheduler series carry the rank labels, tokenizer series don't.
function sglangFamilies(snap: EngineSnapshot, ctx: MetricsContext): Family[] {
  const tokenizer: Labels = { model_name: ctx.modelName, engine_type: 'unified' };
  const scheduler: Labels = { ...tokenizer, tp_rank: '0', pp_rank: '0' };
  const c = snap.counters;
  const s = (name: string, help: string, value: number) => gauge(name, help, scheduler, value);
  return [
    s('sglang:num_running_reqs', 'The number of running requests.', snap.running),
    s('sglang:num_used_tokens', 'The number of used tokens.', snap.kvUsedTokens),
    s('sglang:token_usage', 'The token usage.', snap.kvCache),
    s('sglang:gen_throughput', 'The generation throughput (token/s).', snap.genThroughput),
    s('sglang:num_queue_reqs', 'The number of requests in the waiting queue.', snap.waiting),
    // As SGLang's scheduler sets it (log_prefill_stats): the share of the latest prefill batch's
    // tokens its radix cache served, not a lifetime ratio.
    s('sglang:cache_hit_rate', 'The prefix cache hit rate.', snap.lastPrefillHitRate),
    s('sglang:max_total_num_tokens', 'Maximum total number of tokens in the KV cache pool.', snap.kvCapacityTokens),
    // A gauge in the client's default multiprocess mode ("all") gets a per-process `pid` label.
    gauge('sglang:num_retracted_reqs', 'The number of retracted requests.', { ...scheduler, pid: '4242' }, 0),
    histogram(snap, 'queue', 'sglang:queue_time_seconds', 'Histogram of queueing time in seconds.', scheduler),
    counter('sglang:prompt_tokens', 'Number of prefill tokens processed.', tokenizer, c.promptTokens),
    counter('sglang:generation_tokens', 'Number of generation tokens processed.', tokenizer, c.generationTokens),
    counter('sglang:num_requests', 'Number of requests processed.', tokenizer, c.finished.stop + c.finished.length),
    counter('sglang:num_aborted_requests', 'Number of requests aborted.', tokenizer, c.finished.abort),
    histogram(
      snap,
      'ttft',
      'sglang:time_to_first_token_seconds',
      'Histogram of time to first token in seconds.',
      tokenizer,
    ),
    histogram(
      snap,
      'itl',
      'sglang:inter_token_latency_seconds',
      'Histogram of inter-token latency in seconds.',
      tokenizer,
    ),
    histogram(
      snap,
      'e2e',
      'sglang:e2e_request_latency_seconds',
      'Histogram of End-to-end request latency in seconds',
      tokenizer,
    ),
  ];
}
