// The agent's live view of every pod it may route to: its own node's pods (scraped telemetry and
// a predictor learned from the TTFTs it measures) and other nodes' pods (gossiped estimates).
// It turns that view into router candidates, keeps per-pod request bookkeeping, and wakes
// requests waiting for a pod whenever something changes.
import { Learner } from '../predict/learner.ts';
import type { PredictorOptions } from '../predict/predictor.ts';
import type { Candidate, WindowedMetric } from '../route/candidate.ts';
import type { PodTelemetry } from '../telemetry/pod-telemetry.ts';
import { staleAfterMs } from '../telemetry/scraper.ts';
import { predictedTtft, uncachedPromptTokens } from '../route/score.ts';
import { PrefixIndex } from '../prefix/index.ts';
import type { Pod, PodEstimate, PodLoad, RequestKind, RouteRequest } from '../types.ts';

export interface PoolOptions {
  node: string;
  scrapeIntervalMs: number;
  /** Gossiped estimates older than this are stale (the origin's TTL covers silent origins). */
  peerMaxAgeMs: number;
  networkCostMs: number;
  /** The window gossiped as a pod's `queued` (and used for peers' exclusion rules). */
  referenceWindowMs: number;
  /** A pod that failed a request before its first byte sits out this long. */
  failureCooldownMs: number;
  /** Requests this agent has at one pod at once (= connections); past it the pod is at capacity. */
  maxInFlightPerPod?: number;
  now: () => number;
  predictor?: Partial<PredictorOptions>;
  /**
   * Peers' pods a decision looks at, per model: the ones predicted fastest when gossip last
   * changed them (default 32). Keeps a decision's cost flat however many pods the cluster has.
   */
  peerShortlist?: number;
  /** Bound of the prefix index: prompt blocks remembered per local pod. */
  prefixBlocksPerPod?: number;
}

/** Default for `PoolOptions.peerShortlist`. */
export const DEFAULT_PEER_SHORTLIST = 32;

interface LocalPod {
  pod: Pod;
  /** The scraper's record of the pod (windows, latest load and when): the one record of its
   *  scraped state; absent until the first good scrape. */
  telemetry: PodTelemetry | undefined;
  inFlight: number;
  pendingPromptTokens: number;
  unseenSent: number;
  unhealthyUntil: number;
  /** Why its last page was refused (telemetry trust boundary); unhealthy until a plausible one. */
  implausible: string | undefined;
  /** Counts scrapes: a request answered in the epoch it was sent in leaves `unseenSent` at once. */
  epoch: number;
  /** Prompt tokens the pod computed (not served from cache) since we know it: the prefix index's clock. */
  computedTokens: number;
}

interface PeerTraffic {
  inFlight: number;
  pendingPromptTokens: number;
  unseenSent: number;
  lastVersion: number;
  unhealthyUntil: number;
  epoch: number;
}

type Waiter = () => void;

export interface PodTicket {
  /** Mean predicted TTFT the request was sent on (NaN for peers' pods). */
  predictedMs: number;
  firstByte(ms: number): void;
  answered(ms: number): void;
  end(ok: boolean): void;
}

/** What /debug/state and the dashboard predict for: a typical chat turn. */
const REFERENCE_REQUEST: RouteRequest = {
  kind: 'chat',
  model: '',
  tenant: '',
  namespace: '',
  tags: [],
  promptTokens: 256,
  stream: true,
};

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
  readonly #peerTraffic = new Map<string, PeerTraffic>();
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
      else {
        this.#local.set(pod.uid, {
          pod,
          telemetry: undefined,
          inFlight: 0,
          pendingPromptTokens: 0,
          unseenSent: 0,
          unhealthyUntil: 0,
          implausible: undefined,
          epoch: 0,
          computedTokens: 0,
        });
      }
    }
    this.#localByModel = new Map();
    for (const local of this.#local.values()) {
      for (const model of local.pod.models) {
        const list = this.#localByModel.get(model);
        if (list) list.push(local);
        else this.#localByModel.set(model, [local]);
      }
    }
    this.#podsVersion++;
    this.#changed();
  }

  /** A good scrape of a local pod; `telemetry` (the scraper's) has already recorded `load`. */
  recordLoad(uid: string, load: PodLoad, telemetry: PodTelemetry): void {
    const local = this.#local.get(uid);
    if (!local) return;
    local.telemetry = telemetry;
    local.implausible = undefined;
    local.pod.engine ??= load.engine;
    // Our requests sent before this scrape now show in its queue; stop counting them twice.
    local.unseenSent = 0;
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
   * A failed scrape: nothing to record (it goes stale on its own), but waiters re-decide. A page
   * refused as implausible makes the pod unhealthy, with that reason, until a plausible one.
   */
  recordScrapeFailure(uid: string, implausible?: string): void {
    const local = this.#local.get(uid);
    if (!local) return;
    if (implausible !== undefined) local.implausible = implausible;
    this.#changed();
  }

  /** Other nodes' pods, as gossip currently knows them. */
  setRemote(estimates: readonly PodEstimate[]): void {
    this.#remote = estimates.filter((e) => e.origin !== this.options.node);
    const live = new Set(this.#remote.map((e) => e.pod.uid));
    for (const e of this.#remote) {
      const traffic = this.#peerTraffic.get(e.pod.uid);
      if (traffic && e.version !== traffic.lastVersion) {
        traffic.lastVersion = e.version;
        traffic.unseenSent = 0;
        traffic.epoch++;
      }
    }
    for (const uid of this.#peerTraffic.keys()) if (!live.has(uid)) this.#peerTraffic.delete(uid);
    this.#peersByModel = this.#shortlists();
    this.#podsVersion++;
    this.#changed();
  }

  /** Per model, the peers' pods predicted fastest for a typical request now, at most `peerShortlist`. */
  #shortlists(): Map<string, PodEstimate[]> {
    const limit = this.options.peerShortlist ?? DEFAULT_PEER_SHORTLIST;
    const byModel = new Map<string, PodEstimate[]>();
    for (const e of this.#remote) {
      for (const model of e.pod.models) {
        const list = byModel.get(model);
        if (list) list.push(e);
        else byModel.set(model, [e]);
      }
    }
    const now = this.options.now();
    for (const [model, list] of byModel) {
      if (list.length <= limit) continue;
      const reference = { ...REFERENCE_REQUEST, model };
      const ranked = list.map((e) => ({ e, ms: predictedTtft(this.#peerCandidate(e, now), reference) }));
      ranked.sort((a, b) => a.ms - b.ms);
      byModel.set(
        model,
        ranked.slice(0, limit).map((r) => r.e),
      );
    }
    return byModel;
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
    for (const local of locals) out.push(this.#localCandidate(local, now, cached?.get(local.pod.uid) ?? 0));
    const peers = model === undefined ? this.#remote : (this.#peersByModel.get(model) ?? []);
    for (const estimate of peers) out.push(this.#peerCandidate(estimate, now));
    return out;
  }

  #localCandidate(local: LocalPod, now: number, expectedCachedTokens = 0): Candidate {
    const telemetry = local.telemetry;
    const load = telemetry?.latest;
    return {
      pod: local.pod,
      where: 'local',
      ageMs: now - (load?.at ?? -Infinity),
      maxAgeMs: staleAfterMs(this.options.scrapeIntervalMs),
      healthy: now >= local.unhealthyUntil && local.implausible === undefined,
      ...(local.implausible !== undefined ? { unhealthyReason: local.implausible } : {}),
      queuedNow: load?.waiting ?? 0,
      running: load?.running ?? 0,
      kvCache: load?.kvCache ?? NaN,
      average: (metric: WindowedMetric, windowMs: number) => {
        if (!telemetry) return 0;
        const window =
          metric === 'queued' ? telemetry.waiting : metric === 'running' ? telemetry.running : telemetry.kvCache;
        const value = window.average(windowMs, now);
        return Number.isNaN(value) ? 0 : value;
      },
      params: this.#learner.params(local.pod.uid),
      embeddingParams: this.#learner.embeddingParams(local.pod.uid),
      logMargin: (q: number) => this.#learner.logMargin(local.pod.uid, q, (load?.waiting ?? 0) + local.unseenSent),
      inFlight: local.inFlight,
      maxInFlight: this.#maxInFlight(local.pod),
      unseenSent: local.unseenSent,
      pendingPromptTokens: local.pendingPromptTokens,
      networkCostMs: 0,
      expectedCachedTokens,
    };
  }

  #peerCandidate(estimate: PodEstimate, now: number): Candidate {
    const traffic = this.#peerTraffic.get(estimate.pod.uid);
    return {
      pod: estimate.pod,
      where: 'peer',
      ageMs: Math.max(0, now - estimate.at),
      maxAgeMs: this.options.peerMaxAgeMs,
      healthy: now >= (traffic?.unhealthyUntil ?? 0),
      queuedNow: estimate.queuedNow,
      running: estimate.running,
      kvCache: estimate.kvCache,
      // A peer gossips one reference window; it stands in for whatever window a rule names.
      average: (metric: WindowedMetric) =>
        metric === 'queued' ? estimate.queued : metric === 'running' ? estimate.running : estimate.kvCache,
      params: estimate.params,
      // Gossip carries one model and no error distribution: a peer's pod is judged with the
      // node's own calibration (how far this agent's kind of prediction strays), floored cold.
      logMargin: (q: number) => this.#learner.logMargin(undefined, q, estimate.queuedNow + (traffic?.unseenSent ?? 0)),
      inFlight: traffic?.inFlight ?? 0,
      maxInFlight: this.#maxInFlight(estimate.pod),
      unseenSent: traffic?.unseenSent ?? 0,
      pendingPromptTokens: traffic?.pendingPromptTokens ?? 0,
      networkCostMs: this.options.networkCostMs,
      // No prefix estimate for peers' pods: a conversation reaches one agent per client
      // connection, and a per-pod summary in gossip would cost bandwidth for rare wins.
      expectedCachedTokens: 0,
    };
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
  ): PodTicket {
    const promptTokens = uncachedPromptTokens(wholePromptTokens, c.expectedCachedTokens);
    const features = {
      queued: c.queuedNow + c.unseenSent,
      running: c.running,
      promptTokens,
      pendingPromptTokens: c.pendingPromptTokens,
    };
    const local = c.where === 'local' ? this.#local.get(c.pod.uid) : undefined;
    const traffic = c.where === 'peer' ? this.#trafficFor(c.pod.uid) : undefined;
    const counters = local ?? traffic!;
    if (local && promptBlocks?.length) this.#prefix.record(local.pod.uid, promptBlocks);
    const predictedMs = local ? this.#learner.predict(local.pod.uid, kind, features) : NaN;
    const epoch = counters.epoch;
    counters.inFlight++;
    counters.unseenSent++;
    // A non-streamed request's prefill ends unseen (its first byte is its whole answer): counted
    // until the answer, its prompt would stand in front of later requests for its whole decode.
    // The scraped queue and batch show it instead.
    const counted = stream || kind === 'embeddings' ? promptTokens : 0;
    counters.pendingPromptTokens += counted;
    let pending = true;
    let ended = false;
    // Its prompt stops standing in front of later requests once its first token is out.
    const prefilled = () => {
      if (!pending) return;
      pending = false;
      counters.pendingPromptTokens -= counted;
    };
    const learn = (ms: number) => {
      if (local) this.#learner.observeTtft(local.pod.uid, kind, features, predictedMs, ms, this.options.now());
    };
    return {
      predictedMs,
      firstByte: (ms: number) => {
        prefilled();
        learn(ms);
      },
      answered: (ms: number) => {
        prefilled();
        // An embedding's answer time is its prefill: a TTFT, learned as one.
        if (kind === 'embeddings') return learn(ms);
        // A generation's answer time holds its decode too: only a bound (see Learner.observeAnswer).
        if (local) this.#learner.observeAnswer(local.pod.uid, kind, features, predictedMs, ms);
      },
      end: () => {
        if (ended) return;
        ended = true;
        prefilled();
        counters.inFlight--;
        // Finished before the next report: the pod holds nothing of it, so it is no unseen queue.
        // (Left counted, a fast pod answering hundreds of short requests between two scrapes
        // would look hundreds deep and be throttled far below its capacity.)
        if (counters.epoch === epoch && counters.unseenSent > 0) counters.unseenSent--;
        this.#changed();
      },
    };
  }

  markFailed(c: Candidate): void {
    const until = this.options.now() + this.options.failureCooldownMs;
    if (c.where === 'local') {
      const local = this.#local.get(c.pod.uid);
      if (local) local.unhealthyUntil = until;
    } else this.#trafficFor(c.pod.uid).unhealthyUntil = until;
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
   * local pod, and the `maxPeerPods` peers' pods predicted fastest (`remoteKnown` says how many
   * there are), so the view's size stays bounded however large the cluster.
   */
  debugState(maxPeerPods = Infinity) {
    const now = this.options.now();
    const predicted = new Map(this.candidates().map((c) => [c.pod.uid, predictedTtft(c, REFERENCE_REQUEST)]));
    const remote =
      this.#remote.length <= maxPeerPods
        ? this.#remote
        : this.#remote.toSorted((a, b) => predicted.get(a.pod.uid)! - predicted.get(b.pod.uid)!).slice(0, maxPeerPods);
    return {
      referencePromptTokens: REFERENCE_REQUEST.promptTokens,
      prefixIndex: this.#prefix.memory(),
      local: [...this.#local.values()].map((l) => ({
        pod: l.pod,
        load: l.telemetry?.latest,
        queuedAvg30s: l.telemetry?.waiting.average(30_000, now) ?? null,
        ageMs: now - (l.telemetry?.latest?.at ?? -Infinity),
        inFlight: l.inFlight,
        unseenSent: l.unseenSent,
        healthy: now >= l.unhealthyUntil && l.implausible === undefined,
        unhealthyReason: l.implausible ?? (now < l.unhealthyUntil ? 'failed a request before its first byte' : null),
        predictedTtftMs: predicted.get(l.pod.uid),
        prefix: {
          blocks: this.#prefix.podBlocks(l.pod.uid),
          lastRequestCachedTokens: this.#lastLookup.get(l.pod.uid) ?? 0,
        },
        ...this.#learner.stats(l.pod.uid),
      })),
      remoteKnown: this.#remote.length,
      remote: remote.map((e) => ({
        ...e,
        ageMs: now - e.at,
        traffic: this.#peerTraffic.get(e.pod.uid),
        predictedTtftMs: predicted.get(e.pod.uid),
      })),
    };
  }

  /** The pod's own concurrency when known (its max-num-seqs), within the configured cap. */
  #maxInFlight(pod: Pod): number {
    return Math.min(this.options.maxInFlightPerPod ?? Infinity, pod.maxConcurrency ?? Infinity);
  }

  #trafficFor(uid: string): PeerTraffic {
    let traffic = this.#peerTraffic.get(uid);
    if (!traffic) {
      traffic = { inFlight: 0, pendingPromptTokens: 0, unseenSent: 0, lastVersion: -1, unhealthyUntil: 0, epoch: 0 };
      this.#peerTraffic.set(uid, traffic);
    }
    return traffic;
  }

  #changed(): void {
    this.#version++;
    if (this.#waiters.size === 0) return;
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const wake of waiters) wake();
  }
}
