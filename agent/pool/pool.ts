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
import { InflightPrefixes } from '../prefix/inflight.ts';
import type { PreciseIndex } from '../prefix/precise-index.ts';
import { summaryCachedTokens } from '../prefix/summary.ts';
import { tokenBlockKeys } from '../prefix/token-blocks.ts';
import { PrefixSummaries } from './prefix-summaries.ts';

/** What the pool asks of a precise index (the bench's exact-cache oracle answers the same questions). */
export type PreciseLookup = Pick<PreciseIndex, 'cachedTokensByPod' | 'setCapacity' | 'blockSize'> &
  Partial<Pick<PreciseIndex, 'summary'>>;

import type { Pod, PodEstimate, PodLoad, RequestKind } from '../types.ts';
import { localCandidate, peerCandidate, REFERENCE_REQUEST } from './candidates.ts';
import { poolDebugState } from './debug-state.ts';
import { fastestPerNode, indexByModel, peerShortlists } from './model-index.ts';
import { DEFAULT_PEER_SHORTLIST, type PoolOptions } from './options.ts';
import { PeerTrafficBook } from './peer-traffic.ts';
import { countSend, localEstimate, newLocalPod, type LocalPod } from './pod-records.ts';
import { Ejections } from './ejection.ts';
import { PoolChanges } from './changes.ts';
import { warmStart } from './warm-start.ts';
import { openTicket, type PodTicket } from './ticket.ts';

// Importers name the pool's types from here, wherever they are defined.
export { DEFAULT_PEER_SHORTLIST, type PoolOptions } from './options.ts';
export type { PodTicket } from './ticket.ts';

export class PodPool {
  readonly options: PoolOptions;
  readonly #local = new Map<string, LocalPod>();
  /** The model of the local pods, and where it learns. */
  readonly #learner: Learner;
  /** Which prompt blocks each local pod probably still caches, from what this agent sent it. */
  readonly #prefix: PrefixIndex;
  /** The pods' own KV-cache events, where subscribed; `synced` says, per pod, whether to trust it now. */
  #precise: { index: PreciseLookup; synced: (uid: string) => boolean } | undefined;
  /** With events: prompts sent to each local pod still being prefilled there (not in its events yet). */
  readonly #inflight = new InflightPrefixes();
  readonly #summaries = new PrefixSummaries();
  #remote: PodEstimate[] = [];
  /** Candidate indexes by model, rebuilt when pods come or go (never per request). */
  #localByModel = new Map<string, LocalPod[]>();
  #peersByModel = new Map<string, PodEstimate[]>();
  /** Peers' pods, fastest predicted for a typical request first, ranked when gossip changed them. */
  #peersRanked: PodEstimate[] = [];
  /** The fastest of those on each peer node, in the same order. */
  #peerNodesRanked: PodEstimate[] = [];
  readonly #peerTraffic = new PeerTrafficBook();
  readonly #changes = new PoolChanges();
  /** Pods out of decisions after failing before their first byte, until a probe readmits them. */
  readonly #ejections: Ejections;
  /** Peers' pods by uid (address and origin for probes and suspicion). */
  #remoteByUid = new Map<string, PodEstimate>();
  readonly #peerFailureListeners = new Set<(origin: string) => void>();
  /** Bumped when pods come or go (local discovery, gossip), not on every scrape. */
  #podsVersion = 0;
  #models: { version: number; models: ReadonlySet<string> } = { version: -1, models: new Set() };
  /** Expected cached tokens per local pod for the last prompt looked up (the dashboard shows them). */
  #lastLookup: ReadonlyMap<string, number> = new Map();

  constructor(options: PoolOptions) {
    this.options = options;
    this.#learner = new Learner(options.predictor);
    this.#prefix = new PrefixIndex({ maxBlocksPerPod: options.prefixBlocksPerPod });
    this.#ejections = new Ejections(options.ejection);
  }

  /**
   * Lets the pods' KV-cache events decide their expected cached tokens: for a pod whose subscriber
   * is `synced` and a request whose token ids are known, the precise index answers; otherwise
   * (no events, a resync under way, no tokenizer) the approximate index does, pod by pod.
   */
  attachPreciseIndex(index: PreciseLookup, synced: (uid: string) => boolean): void {
    this.#precise = { index, synced };
  }

  /** Bumped on every change (a scrape, a gossip update, a request ending). */
  get version(): number {
    return this.#changes.version;
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
      this.#ejections.forget(uid);
      this.#summaries.forget(uid);
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
    // Age the prefix index by what the pod computed since and what its KV cache holds.
    const delta = telemetry.lastDelta;
    local.computedTokens += delta?.computedPromptTokens ?? delta?.promptTokens ?? 0;
    if (load.kvCapacityTokens !== undefined && this.#precise) {
      // The engine cannot hold more blocks than its KV cache: neither may its index.
      this.#precise.index.setCapacity(uid, load.kvCapacityTokens / this.#precise.index.blockSize(uid));
    }
    if (load.kvCapacityTokens !== undefined) {
      this.#prefix.observe(uid, {
        capacityBlocks: load.kvCapacityTokens / this.#prefix.blockTokens,
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
    this.#warmStart(estimates);
    this.#remote = estimates.filter((e) => e.origin !== this.options.node);
    this.#peerTraffic.reconcile(this.#remote);
    this.#remoteByUid = new Map(this.#remote.map((e) => [e.pod.uid, e]));
    const now = this.options.now();
    this.#ejections.prune((uid) => this.#local.has(uid) || this.#remoteByUid.has(uid), now);
    // Traffic records are forgotten with their pods; one still ejected comes back ejected.
    for (const e of this.#remote)
      if (this.#ejections.isOut(e.pod.uid)) this.#peerTraffic.forPod(e.pod.uid).unhealthyUntil = Infinity;
    // Ranked once here, when gossip changes them: decisions (the shortlists), /debug/state and
    // /metrics (the fastest first) then cost what the local pods and their bounds cost.
    this.#peersRanked = this.#remote
      .map((e) => ({ e, ms: predictedTtft(this.#peerCandidate(e, now), REFERENCE_REQUEST) }))
      .sort((a, b) => a.ms - b.ms)
      .map((r) => r.e);
    this.#peersByModel = peerShortlists(this.#peersRanked, this.options.peerShortlist ?? DEFAULT_PEER_SHORTLIST);
    this.#peerNodesRanked = fastestPerNode(this.#peersRanked);
    this.#podsVersion++;
    this.#changed();
  }

  /** A warm start for the local pods not measured yet (warm-start.ts). */
  #warmStart(estimates: readonly PodEstimate[]): void {
    warmStart(this.#learner, this.options.node, this.#local, estimates);
  }

  /**
   * Router candidates: with a model, the local pods serving it and that model's peer shortlist
   * (what a request decides over, at a cost independent of the cluster's size); without one,
   * every known pod (state views). With a request's `promptBlocks`, each local pod's expected
   * cached tokens (one index lookup for all pods).
   */
  candidates(
    model?: string,
    promptBlocks?: readonly number[],
    tokens?: { ids: readonly number[]; lora?: string },
  ): Candidate[] {
    const now = this.options.now();
    const out: Candidate[] = [];
    const cached = promptBlocks?.length ? this.#prefix.cachedTokensByPod(promptBlocks) : undefined;
    const precise =
      this.#precise && tokens?.ids.length ? this.#precise.index.cachedTokensByPod(tokens.ids, tokens.lora) : undefined;
    const lookup = precise || cached ? new Map<string, number>() : undefined;
    const locals = model === undefined ? this.#local.values() : (this.#localByModel.get(model) ?? []);
    for (const local of locals) {
      const uid = local.pod.uid;
      const exact = precise !== undefined && this.#precise!.synced(uid);
      const sending =
        exact && promptBlocks ? this.#inflight.leadingBlocks(uid, promptBlocks) * this.#prefix.blockTokens : 0;
      const tokensCached = exact ? Math.max(precise.get(uid) ?? 0, sending) : (cached?.get(uid) ?? 0);
      if (tokensCached > 0) lookup?.set(uid, tokensCached);
      const source = exact ? 'precise' : cached ? 'approximate' : undefined;
      out.push(localCandidate(local, now, this.#learner, this.options, tokensCached, source));
    }
    if (lookup) this.#lastLookup = lookup;
    const peers = model === undefined ? this.#remote : (this.#peersByModel.get(model) ?? []);
    // Peers' pods that gossip a prefix summary: the prompt's keys at the engines' default block size.
    let keys: number[] | undefined;
    for (const estimate of peers) {
      let peerCached = 0;
      if (tokens?.ids.length && estimate.prefixSummary) {
        keys ??= tokenBlockKeys(tokens.ids, 16, tokens.lora);
        peerCached = summaryCachedTokens(estimate.prefixSummary, keys, 16);
      }
      out.push(this.#peerCandidate(estimate, now, peerCached));
    }
    return out;
  }

  #peerCandidate(estimate: PodEstimate, now: number, cached = 0): Candidate {
    return peerCandidate(estimate, this.#peerTraffic.get(estimate.pod.uid), now, this.#learner, this.options, cached);
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
    const precise = this.#precise;
    const out: PodEstimate[] = [];
    for (const local of this.#local.values()) {
      const load = local.telemetry?.latest;
      if (!load) continue;
      // What the pod holds, for other nodes (only while its events are in step), and its LoRA slots.
      const calibration = this.#learner.calibrationSummary(local.pod.uid);
      const extras = {
        ...(precise?.index.summary && precise.synced(local.pod.uid)
          ? this.#summaries.field(local.pod.uid, now, () => precise.index.summary!(local.pod.uid))
          : {}),
        ...(load.lora ? { lora: load.lora } : {}),
        ...(calibration ? { calibration } : {}),
      };
      out.push(localEstimate(local, load, now, this.#learner.params(local.pod.uid), this.options, extras));
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
    const sent = local && promptBlocks && this.#precise ? this.#inflight.add(local.pod.uid, promptBlocks) : undefined;
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
      prefilled: sent,
      ended: (ok) => {
        // The engine frees the prompt's blocks into its LRU now: they age from here (prefix/index.ts).
        if (ok && local && promptBlocks?.length && this.#local.get(local.pod.uid) === local)
          this.#prefix.record(local.pod.uid, promptBlocks);
      },
    });
  }

  /**
   * The pod failed a request before its first byte. `unreachable` (refused, reset, no headers in
   * time): ejected from every decision of this agent at once, until its backoff ends and a probe
   * readmits it (ejectedDue/probed), and a peer's pod makes its origin suspect (onPeerPodFailed:
   * the gossip's failure detector). `answered` (it said 429, 5xx, or refused our key): it is up,
   * so it only sits out `answerCooldownMs`.
   */
  markFailed(c: Candidate, how: 'unreachable' | 'answered' = 'unreachable'): void {
    const now = this.options.now();
    if (how === 'answered') {
      if (!this.#ejections.isOut(c.pod.uid)) this.#setOut(c.pod.uid, now + (this.options.answerCooldownMs ?? 1000));
      this.#changed();
      return;
    }
    this.#ejections.eject(c.pod.uid, now);
    this.#setOut(c.pod.uid, Infinity);
    if (c.where === 'peer') {
      const origin = this.#remoteByUid.get(c.pod.uid)?.origin;
      if (origin !== undefined) for (const listener of this.#peerFailureListeners) listener(origin);
    }
    this.#changed();
  }

  /** Called with a peer's node name when one of its pods failed before its first byte. */
  onPeerPodFailed(listener: (origin: string) => void): () => void {
    this.#peerFailureListeners.add(listener);
    return () => this.#peerFailureListeners.delete(listener);
  }

  /** Ejected pods whose backoff is over, to probe (pod-probe.ts), with where to reach them. */
  ejectedDue(): { uid: string; address: string }[] {
    const out: { uid: string; address: string }[] = [];
    for (const uid of this.#ejections.due(this.options.now())) {
      const pod = this.#local.get(uid)?.pod ?? this.#remoteByUid.get(uid)?.pod;
      if (pod) out.push({ uid, address: pod.address });
      else this.#ejections.forget(uid);
    }
    return out;
  }

  /** When the next ejection's backoff ends (undefined: none running). */
  nextEjectionDue(): number | undefined {
    return this.#ejections.nextDue();
  }

  /** A probe of an ejected pod answered: readmitted when `ok`, ejected again for longer when not. */
  probed(uid: string, ok: boolean): void {
    if (!this.#ejections.probed(uid, ok, this.options.now())) return;
    this.#setOut(uid, 0);
    this.#changed();
  }

  /** How many times in a row a pod was ejected, while it is out (views). */
  ejection(uid: string): { count: number; until: number } | undefined {
    return this.#ejections.state(uid);
  }

  #setOut(uid: string, until: number): void {
    const local = this.#local.get(uid);
    if (local) local.unhealthyUntil = until;
    else if (until > 0 || this.#peerTraffic.get(uid)) this.#peerTraffic.forPod(uid).unhealthyUntil = until;
  }

  /** Resolves on the pool's next change, at `timeoutMs`, or when `signal` aborts. */
  nextChange(timeoutMs: number, signal: AbortSignal): Promise<'change' | 'timeout' | 'aborted'> {
    return this.#changes.next(timeoutMs, signal);
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
    this.#changes.changed();
  }
}
