// What the router sees of one pod at decision time. Built by the agent from local telemetry or
// a peer's gossiped estimate; plain data plus one windowed-average accessor.
import type { Pod, PredictorParams } from '../types.ts';

export type WindowedMetric = 'queued' | 'running' | 'kvCache';

export interface Candidate {
  pod: Pod;
  where: 'local' | 'peer';
  /** ms since the last good scrape (local) or since the origin produced the estimate (peer). */
  ageMs: number;
  /** Older than this, the view is stale and the pod is not a candidate. */
  maxAgeMs: number;
  healthy: boolean;
  /** Why it is not healthy, when known (e.g. its metrics page was refused as implausible). */
  unhealthyReason?: string;
  queuedNow: number;
  running: number;
  kvCache: number;
  /** Average of a metric over the window a policy names (peers: the gossiped reference window). */
  average(metric: WindowedMetric, windowMs: number): number;
  /**
   * True when `average(metric, windowMs) <= limit` is certain without computing it; false when
   * not (then average() decides). Absent: average() always decides.
   */
  averageAtMost?(metric: WindowedMetric, windowMs: number, limit: number): boolean;
  params: PredictorParams;
  /** The pod's embeddings model (prefill only); absent for peers' pods (gossip carries one model). */
  embeddingParams?: PredictorParams;
  /**
   * Log factor from the mean predicted TTFT to its q-quantile for a request sent now, learned from
   * how measurements strayed from predictions (agent/predict/calibration.ts). Absent: exact.
   */
  logMargin?: (q: number) => number;
  /**
   * Log factor by which the mean prediction is known to fall short for a request sent now (a
   * local pod whose batch is full: the wait for a slot is in no feature of the model). Absent: 0.
   */
  meanLogBias?: () => number;
  /** This agent's requests to the pod that have not finished. */
  inFlight: number;
  /** At this many requests in flight the pod takes no more from this agent (absent: no cap). */
  maxInFlight?: number;
  /** This agent's requests sent since the pod's last scrape or report: queue the pod hasn't shown yet. */
  unseenSent: number;
  /** Prompt tokens of this agent's requests at the pod still awaiting their first token. */
  pendingPromptTokens: number;
  /** This agent's requests at the pod still awaiting their first token (streamed ones: a non-streamed prefill ends unseen). */
  pendingRequests?: number;
  /** This agent's recent rate of requests sent to the pod, per ms (absent: unknown, taken as 0). */
  sentPerMs?: number;
  /** Added latency for reaching the pod (0 for local pods). */
  networkCostMs: number;
  /** What running this LoRA adapter at the pod adds to its TTFT (absent: nothing known, 0). */
  adapterCostMs?(adapter: string): number;
  /**
   * Of this request's prompt, the tokens the pod is expected to hold in its prefix cache (the
   * agent's prefix index, agent/prefix/). Absent or 0: none; always 0 for peers' pods, whose
   * caches gossip does not describe.
   */
  expectedCachedTokens?: number;
  /**
   * Which index said so: `precise` (the pod's own KV-cache events, token-exact) or `approximate`
   * (what this agent sent it, by text blocks). Absent: no prefix lookup was made.
   */
  prefixSource?: 'precise' | 'approximate' | 'gossip';
}
