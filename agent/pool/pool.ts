// The agent's live view of every pod it may route to: its own node's pods (scraped telemetry and
// a predictor learned from the TTFTs it measures) and other nodes' pods (gossiped estimates).
// It turns that view into router candidates, keeps per-pod request bookkeeping, and wakes
// requests waiting for a pod whenever something changes. Its parts live beside it: the records
// (pod-records, peer-traffic), candidate building, the per-model indexes, tickets, the debug view.
import { Learner } from '../predict/learner.ts';
import type { Candidate } from '../route/candidate.ts';
import type { PodTelemetry } from '../telemetry/pod-telemetry.ts';
import { predictedTtft, uncachedPromptTokens } from '../route/score.ts';
import { PrefixIndex } from '../prefix/index.ts';
import type { Pod, PodEstimate, PodLoad, RequestKind } from '../types.ts';
import { localCandidate, peerCandidate, REFERENCE_REQUEST } from './candidates.ts';
import { poolDebugState } from './debug-state.ts';
import { fastestPerNode, indexByModel, peerShortlists } from './model-index.ts';
import { DEFAULT_PEER_SHORTLIST, type PoolOptions } from './options.ts';
import { PeerTrafficBook } from './peer-traffic.ts';
import { countSend, newLocalPod, type LocalPod } from './pod-records.ts';
import { openTicket, type PodTicket } from './ticket.ts';

// Importers name the pool's types from here, wherever they are defined.
export { DEFAULT_PEER_SHORTLIST, type PoolOptions } from './options.ts';
export type { PodTicket } from './ticket.ts';

type Waiter = () => void;

export class PodPool {
  readonly options: PoolOptions;
  readonly #local = new Map<string, LocalPod>();
  /** The model of the local pods, and where it learns. */
  readonly #learner: Learner;
  /** Which prompt blocks each local pod probably still caches, from what this agent sent it. */
  readonly #prefix: PrefixIndex;
  #remote: PodEstimate[] = [];
  /** Candidate indexes by model, rebuilt when pods come or go (never per request). */
  #localByModel = new Map<string, LocalPod[]>();
  #peersByModel = new Map<string, PodEstimate[]>();
  /** Peers' pods, fastest predicted for a typical request first, ranked when gossip changed them. */
  #peersRanked: PodEstimate[] = [];
  /** The fastest of those on each peer node, in the same order. */
  #peerNodesRanked: PodEstimate[] = [];
  readonly #peerTraffic = new PeerTrafficBook();
  readonly #waiters = new Set<Waiter>();
  #version = 0;
  /** Bumped when pods come or go (local discovery, gossip), not on every scrape. */
  #podsVersion = 0;
  #models: { version: number; models: ReadonlySet<string> } = { version: -1, models: new Set() };
  /** Expected cached tokens per local pod for the last prompt looked up (the dashboard shows them). */
  #lastLookup: ReadonlyMap<string, number> = new Map();

  constructor(options: PoolOptions) {
    this.options = options;
    this.#learner = new Learner(options.predictor);
    this.#prefix = new PrefixIndex({ maxBlocksPerPod: options.prefixBlocksPerPod });
  }

  /** Bumped on every change (a scrape, a gossip update, a request ending). */
  get version(): number {
    return this.#version;
  }

  /** Every model a known pod serves; recomputed only when the set of pods changes. */
  servedModels(): ReadonlySet<string> {
    if (this.#models.version !== this.#podsVersion) {
      const models = new Set<string>();
      for (const l of this.#local.values()) for (const m of l.pod.models) models.add(m);
      for (const e of this.#remote) for (const m of e.pod.models) models.add(m);
      this.#models = { version: this.#podsVersion, models };
    }
    return this.#models.models;
  }

  localPods(): Pod[] {
    return [...this.#local.values()].map((l) => l.pod);
  }

  /** Replaces the set of local pods (discovery); keeps what is known about pods that stay. */
  setLocalPods(pods: readonly Pod[]): void {
    const next = new Set(pods.map((p) => p.uid));
    for (const uid of this.#local.keys()) {
      if (next.has(uid)) continue;
      this.#local.delete(uid);
      this.#learner.forget(uid);
      this.#prefix.forget(uid);
    }
    for (const pod of pods) {
      const existing = this.#local.get(pod.uid);
      if (existing) existing.pod = { ...pod, engine: pod.engine ?? existing.pod.engine };
      else this.#local.set(pod.uid, newLocalPod(pod));
    }
    this.#localByModel = indexByModel(this.#local.values());
    this.#podsVersion++;
    this.#changed();
  }

  /** A good scrape of a local pod; `telemetry` (the scraper's) has already recorded `load`. */
  recordLoad(uid: string, load: PodLoad, telemetry: PodTelemetry): void {
    const local = this.#local.get(uid);
    if (!local) return;
    local.telemetry = telemetry;
    local.implausible = undefined;
    local.scrapeFailedSinceGood = false;
    local.pod.engine ??= load.engine;
    // Our requests sent before this scrape now show in its queue; stop counting them twice.
    local.unseenSent = 0;
    if (local.sentAdapters)
      for (const [adapter, sentAt] of local.sentAdapters) if (sentAt <= load.at) local.sentAdapters.delete(adapter);
    local.epoch++;
    this.#learner.observeScrape(uid, telemetry.previous, load, telemetry.lastDelta);
    // Age the prefix index by what the pod computed since and what its free KV can still hold.
    const delta = telemetry.lastDelta;
    local.computedTokens += delta?.computedPromptTokens ?? delta?.promptTokens ?? 0;
    if (load.kvCapacityTokens !== undefined) {
      this.#prefix.observe(uid, {
        capacityBlocks: load.kvCapacityTokens / this.#prefix.blockTokens,
        kvUsage: load.kvCache,
        computedTokens: local.computedTokens,
      });
    }
    this.#changed();
  }

  /**
   * A failed scrape: the pod goes stale two intervals after its last good one, and waiters re-decide. A page
   * refused as implausible makes the pod unhealthy, with that reason, until a plausible one.
   */
  recordScrapeFailure(uid: string, implausible?: string): void {
    const local = this.#local.get(uid);
    if (!local) return;
    local.scrapeFailedSinceGood = true;
    if (implausible !== undefined) local.implausible = implausible;
    this.#changed();
  }

  /** Other nodes' pods, as gossip currently knows them. */
  setRemote(estimates: readonly PodEstimate[]): void {
    this.#remote = estimates.filter((e) => e.origin !== this.options.node);
    this.#peerTraffic.reconcile(this.#remote);
    // Ranked once here, when gossip changes them: decisions (the shortlists), /debug/state and
    // /metrics (the fastest first) then cost what the local pods and their bounds cost.
    const now = this.options.now();
    this.#peersRanked = this.#remote
      .map((e) => ({ e, ms: predictedTtft(this.#peerCandidate(e, now), REFERENCE_REQUEST) }))
      .sort((a, b) => a.ms - b.ms)
      .map((r) => r.e);
    this.#peersByModel = peerShortlists(this.#peersRanked, this.options.peerShortlist ?? DEFAULT_PEER_SHORTLIST);
    this.#peerNodesRanked = fastestPerNode(this.#peersRanked);
    this.#podsVersion++;
    this.#changed();
  }

  /**
   * Router candidates: with a model, the local pods serving it and that model's peer shortlist
   * (what a request decides over, at a cost independent of the cluster's size); without one,
   * every known pod (state views). With a request's `promptBlocks`, each local pod's expected
   * cached tokens (one index lookup for all pods).
   */
  candidates(model?: string, promptBlocks?: readonly number[]): Candidate[] {
    const now = this.options.now();
    const out: Candidate[] = [];
    const cached = promptBlocks?.length ? this.#prefix.cachedTokensByPod(promptBlocks) : undefined;
    if (cached) this.#lastLookup = cached;
    const locals = model === undefined ? this.#local.values() : (this.#localByModel.get(model) ?? []);
    for (const local of locals) {
      out.push(localCandidate(local, now, this.#learner, this.options, cached?.get(local.pod.uid) ?? 0));
    }
    const peers = model === undefined ? this.#remote : (this.#peersByModel.get(model) ?? []);
    for (const estimate of peers) out.push(this.#peerCandidate(estimate, now));
    return out;
  }

  #peerCandidate(estimate: PodEstimate, now: number): Candidate {
    return peerCandidate(estimate, this.#peerTraffic.get(estimate.pod.uid), now, this.#learner, this.options);
  }

  /** Local pods by routing state now, for /metrics (an unhealthy pod counts as unhealthy, not stale). */
  localStates(): Record<'fresh' | 'stale' | 'unhealthy', number> {
    const counts = { fresh: 0, stale: 0, unhealthy: 0 };
    const now = this.options.now();
    for (const local of this.#local.values()) {
      const c = localCandidate(local, now, this.#learner, this.options);
      counts[!c.healthy ? 'unhealthy' : c.ageMs > c.maxAgeMs ? 'stale' : 'fresh']++;
    }
    return counts;
  }

  /** What this agent gossips about its own pods (the gossip state numbers the versions). */
  localEstimates(): PodEstimate[] {
    const now = this.options.now();
    const out: PodEstimate[] = [];
    for (const local of this.#local.values()) {
      const load = local.telemetry?.latest;
      if (!load || !local.telemetry) continue;
      const queued = local.telemetry.waiting.average(this.options.referenceWindowMs, now);
      out.push({
        pod: local.pod,
        queued: Number.isNaN(queued) ? load.waiting : queued,
        queuedNow: load.waiting,
        running: load.running,
        kvCache: load.kvCache,
        params: this.#learner.params(local.pod.uid),
        at: load.at,
        origin: this.options.node,
        version: 0,
      });
    }
    return out;
  }

  /**
   * Request bookkeeping for one request sent to `c`. `firstByte` is the first token of a streamed
   * request; `answered` the whole answer of a non-streamed one. Returns the mean prediction the
   * request was sent on (what calibration measures against). Prediction, learning and the pending
   * count use the prompt tokens `c` has not cached; `promptBlocks` (local pods) join its prefix index.
   */
  begin(
    c: Candidate,
    wholePromptTokens: number,
    kind: RequestKind = 'chat',
    stream = true,
    promptBlocks?: readonly number[],
    model?: string,
  ): PodTicket {
    const features = {
      queued: c.queuedNow + c.unseenSent,
      running: c.running,
      promptTokens: uncachedPromptTokens(wholePromptTokens, c.expectedCachedTokens),
      pendingPromptTokens: c.pendingPromptTokens,
    };
    const local = c.where === 'local' ? this.#local.get(c.pod.uid) : undefined;
    if (local && promptBlocks?.length) this.#prefix.record(local.pod.uid, promptBlocks);
    if (local) countSend(local, this.options.now(), this.options.referenceWindowMs);
    // An adapter sent here holds a slot from now on, though the pod's next report has yet to say so.
    if (local && model !== undefined && local.pod.adapters?.includes(model))
      (local.sentAdapters ??= new Map()).set(model, this.options.now());
    return openTicket({
      counters: local ?? this.#peerTraffic.forPod(c.pod.uid),
      learnsAs: local?.pod.uid,
      learner: this.#learner,
      kind,
      stream,
      features,
      now: () => this.options.now(),
      changed: () => this.#changed(),
    });
  }

  markFailed(c: Candidate): void {
    const until = this.options.now() + this.options.failureCooldownMs;
    if (c.where === 'local') {
      const local = this.#local.get(c.pod.uid);
      if (local) local.unhealthyUntil = until;
    } else this.#peerTraffic.forPod(c.pod.uid).unhealthyUntil = until;
    this.#changed();
  }

  nextChange(timeoutMs: number, signal: AbortSignal): Promise<'change' | 'timeout' | 'aborted'> {
    if (signal.aborted) return Promise.resolve('aborted');
    return new Promise((resolve) => {
      const finish = (result: 'change' | 'timeout' | 'aborted') => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        this.#waiters.delete(waiter);
        resolve(result);
      };
      const waiter = () => finish('change');
      const onAbort = () => finish('aborted');
      const timer = setTimeout(() => finish('timeout'), timeoutMs);
      signal.addEventListener('abort', onAbort, { once: true });
      this.#waiters.add(waiter);
    });
  }

  /**
   * Per-pod details for /debug/state and the dashboard, with each pod's prediction now: every
   * local pod, and the first `maxPeerPods` peers' pods ranked fastest when gossip last changed
   * them (`remoteKnown` says how many there are), so the view's size and cost stay bounded however
   * large the cluster.
   */
  debugState(maxPeerPods = Infinity) {
    const now = this.options.now();
    const remote = this.#peersRanked.slice(0, maxPeerPods);
    return poolDebugState({
      now,
      predictedTtftMs: this.#predictedNow(remote, now),
      local: this.#local.values(),
      remote,
      remoteKnown: this.#remote.length,
      peerTraffic: this.#peerTraffic,
      learner: this.#learner,
      prefix: this.#prefix,
      lastLookup: this.#lastLookup,
    });
  }

  /**
   * Each pod's prediction for a typical request now, for /metrics: every local pod, and the
   * fastest pod of each of the `maxPeerNodes` peer nodes ranked fastest when gossip last changed
   * them. Its cost is the local pods' and the bound's, not the cluster's.
   */
  predictions(maxPeerNodes: number): {
    local: { pod: Pod; predictedTtftMs: number }[];
    remote: { pod: Pod; predictedTtftMs: number }[];
  } {
    const now = this.options.now();
    const remote = this.#peerNodesRanked.slice(0, maxPeerNodes);
    const predicted = this.#predictedNow(remote, now);
    const withPrediction = ({ pod }: { pod: Pod }) => ({ pod, predictedTtftMs: predicted.get(pod.uid)! });
    return { local: [...this.#local.values()].map(withPrediction), remote: remote.map(withPrediction) };
  }

  /** Predicted TTFT for a typical request now, by uid: every local pod and the given peers' pods. */
  #predictedNow(remote: readonly PodEstimate[], now: number): Map<string, number> {
    const predicted = new Map<string, number>();
    for (const local of this.#local.values()) {
      const c = localCandidate(local, now, this.#learner, this.options);
      predicted.set(local.pod.uid, predictedTtft(c, REFERENCE_REQUEST));
    }
    for (const e of remote) predicted.set(e.pod.uid, predictedTtft(this.#peerCandidate(e, now), REFERENCE_REQUEST));
    return predicted;
  }

  #changed(): void {
    this.#version++;
    if (this.#waiters.size === 0) return;
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const wake of waiters) wake();
  }
}
