// The telemetry I/O shell: scrape each local model server's /metrics on a fixed interval and hand
// the parsed, engine-neutral load to the rest of the agent.
//
// One tick every interval starts a scrape of every pod whose previous scrape has ended, so a slow
// pod is never scraped twice at once and never delays the others, and the scraper wakes once per
// interval for all pods rather than once per pod (on this kind of host a wake-up costs as much
// CPU as parsing a page); a scrape still in flight past its timeout is failed at a tick. Each pod has its own kept-alive
// connection (scrape-connection.ts, an undici Client): at
// 10–40 scrapes a second per pod, a TCP handshake per scrape would cost more than the scrape. A
// scrape's body bytes are parsed as they arrive (page-fetch.ts), reading only the samples the
// pod's engine adapter uses: a scrape's CPU is the HTTP exchange and a pass over the bytes, with
// almost nothing left for the GC.
//
// Where the pod's engine server can render only the samples asked for (prometheus_client's
// `?name[]=…`: vLLM, SGLang; adapters.ts says where and how it was read), a scrape asks for just
// its adapter's samples: a vLLM page is then ~2 KB instead of ~45 KB. Servers differ (some ignore
// the query, some answer it with an empty page), so a filtered page is checked against the last
// whole one: it must hold every sample of the adapter's that the whole page held. One that
// doesn't, or an error status, gets the whole page asked for at once, in the same scrape; and if
// the whole page does hold what the filtered one lacked, the pod is scraped whole for
// `filterRetryMs` before the filter is tried again. The first scrape of a pod (engine unknown) is
// always whole, and so is every scrape of an engine whose server ignores the query (TGI).

import type { Engine, Pod, PodLoad } from '../types.ts';
import { ADAPTERS, ANY_ENGINE_SELECTOR, detectEngine, filteredTarget, toPodLoad } from './adapters.ts';
import type { MetricPage } from './metric-page.ts';
import { PageFetch } from './page-fetch.ts';
import { ScrapeConnection } from './scrape-connection.ts';
import { PodTelemetry } from './pod-telemetry.ts';
import { DEFAULT_PLAUSIBILITY, implausibility, type PlausibilityBounds } from './plausible.ts';
import type { WindowOptions } from './window.ts';
import { describeError } from '../../shared/describe-error.ts';

export interface ScraperOptions {
  /** Time between the starts of two scrapes of one pod. */
  intervalMs?: number;
  /**
   * Budget for one whole scrape (connect, headers, body); a hung pod costs one timeout per scrape.
   * Checked at each tick, so a scrape fails within one interval after it.
   */
  timeoutMs?: number;
  /** Clock for `PodLoad.at`, health and staleness (ms). Scheduling itself uses real timers. */
  now?: () => number;
  /** A page larger than this is an error, not a memory problem. */
  maxBodyBytes?: number;
  /** Limit for a response's head (scrape-connection.ts; 16 KiB). */
  maxHeaderBytes?: number;
  /**
   * Ask for gzip. Off by default: model servers sit on the same node, where the bytes are cheap
   * and compressing a page 40 times a second is not. A gzipped answer is decoded either way.
   */
  gzip?: boolean;
  /** Windows kept per pod: the longest policy window and the resolution. */
  windows?: Partial<WindowOptions>;
  /** Intervals a pod's last good scrape may age, after a failed one, before it is stale (see `staleAfterMs`). */
  staleAfterIntervals?: number;
  /** What a page may say before it is refused as implausible. */
  plausibility?: PlausibilityBounds;
  /** Ask servers that can filter for only the adapter's samples (`?name[]=…`). Default true. */
  filter?: boolean;
  /** After a filtered page lacked what the whole page has, scrape the pod whole this long (ms) before trying again. */
  filterRetryMs?: number;
}

export interface PodHealth {
  /** Clock time of the last scrape that produced a load. */
  lastGoodAt?: number;
  consecutiveFailures: number;
  lastError?: string;
  /** Scrapes attempted so far (readiness: every pod tried at least once). */
  scrapes: number;
  /** Malformed lines on the last page that still produced a load (0 on a clean page). */
  parseErrors: number;
  /** The last page that produced a load was asked for filtered (`?name[]=…`). */
  filtered: boolean;
  /** Bytes of that page (decoded). */
  pageBytes: number;
}

export type OnLoad = (pod: Pod, load: PodLoad, telemetry: PodTelemetry) => void;
/** `implausible`: the page was read but its numbers cannot be believed (the pod lies or is broken). */
export type OnError = (pod: Pod, error: string, kind: 'failed' | 'implausible') => void;

interface PodState {
  pod: Pod;
  /** The pod's kept-alive connection; made when scraping starts. */
  connection: ScrapeConnection | undefined;
  health: PodHealth;
  telemetry: PodTelemetry;
  inFlight: PageFetch | undefined;
  /** performance.now() when the scrape in flight started. */
  startedAt: number;
  removed: boolean;
  /** The filtered request for `pod.engine` (made once per engine), or undefined when it has none. */
  filtered: { engine: Engine; request: string | undefined } | undefined;
  /** The adapter's samples the last whole page held: what a filtered page must hold too. */
  expected: readonly string[] | undefined;
  /** performance.now() before which the pod is scraped whole (its filtered page lacked samples). */
  wholeUntil: number;
}

/** How a scrape asks for the page: whole, filtered, or whole after a filtered answer fell short (`lacking`). */
type Ask =
  | { kind: 'whole' }
  | { kind: 'filtered'; request: string }
  /** `lacking`: the samples the filtered page didn't have; undefined when it was an error status. */
  | { kind: 'fallback'; lacking: readonly string[] | undefined };

const WHOLE: Ask = { kind: 'whole' };

/** A pod whose last good scrape is older than this many intervals, and a failed one since, is stale. */
export const STALE_AFTER_INTERVALS = 2;

/**
 * How old a pod's last good scrape may be before the pod is stale, for the scraper and the router
 * alike. Staleness is judged against the scrapes started, not the clock alone: once a scrape since
 * the last good one has failed (error, timeout, implausible page), two intervals; while none has,
 * the scrape in flight is also given its timeout, because an answer read late then means the
 * agent's own event loop was busy (large request bodies), not that the pod stopped answering.
 * So request load never makes a pod stale; a pod that stops answering is stale once a scrape
 * times out.
 */
export function staleAfterMs(
  scrape: { intervalMs: number; timeoutMs: number },
  failedSinceGood: boolean,
  intervals = STALE_AFTER_INTERVALS,
): number {
  return intervals * scrape.intervalMs + (failedSinceGood ? 0 : scrape.timeoutMs);
}

const DEFAULTS = { intervalMs: 100, timeoutMs: 1000, maxBodyBytes: 8 * 1024 * 1024, filterRetryMs: 10 * 60_000 };

export class Scraper {
  readonly intervalMs: number;
  readonly timeoutMs: number;
  readonly #now: () => number;
  readonly #maxBodyBytes: number;
  readonly #maxHeaderBytes: number | undefined;
  readonly #gzip: boolean;
  readonly #windows: Partial<WindowOptions>;
  readonly #staleAfterIntervals: number;
  readonly #plausibility: PlausibilityBounds;
  readonly #filter: boolean;
  readonly #filterRetryMs: number;
  readonly #onLoad: OnLoad;
  readonly #onError: OnError;
  readonly #pods = new Map<string, PodState>();
  #ticker: NodeJS.Timeout | undefined;
  /** The same request every scrape. */
  readonly #request: { path: string; headers: Record<string, string> };

  constructor(options: ScraperOptions, onLoad: OnLoad, onError: OnError) {
    this.intervalMs = options.intervalMs ?? DEFAULTS.intervalMs;
    this.timeoutMs = options.timeoutMs ?? DEFAULTS.timeoutMs;
    if (!(this.intervalMs > 0) || !(this.timeoutMs > 0))
      throw new Error('scrape interval and timeout must be positive');
    this.#now = options.now ?? Date.now;
    this.#maxBodyBytes = options.maxBodyBytes ?? DEFAULTS.maxBodyBytes;
    this.#maxHeaderBytes = options.maxHeaderBytes;
    this.#gzip = options.gzip ?? false;
    this.#windows = options.windows ?? {};
    this.#staleAfterIntervals = options.staleAfterIntervals ?? STALE_AFTER_INTERVALS;
    this.#plausibility = options.plausibility ?? DEFAULT_PLAUSIBILITY;
    this.#filter = options.filter ?? true;
    this.#filterRetryMs = options.filterRetryMs ?? DEFAULTS.filterRetryMs;
    if (!(this.#filterRetryMs >= 0)) throw new Error('filterRetryMs must not be negative');
    this.#onLoad = onLoad;
    this.#onError = onError;
    this.#request = {
      path: '/metrics',
      headers: {
        accept: 'text/plain;version=0.0.4;q=1, */*;q=0.1',
        'accept-encoding': this.#gzip ? 'gzip' : 'identity',
      },
    };
  }

  get running(): boolean {
    return this.#ticker !== undefined;
  }

  /** Replace the pod set: new pods start being scraped, missing ones stop (in-flight scrapes are aborted). */
  setPods(pods: readonly Pod[]): void {
    const next = new Map(pods.map((p) => [p.uid, p]));
    for (const [uid, state] of this.#pods) {
      const pod = next.get(uid);
      if (pod === undefined || pod.address !== state.pod.address) this.#remove(uid);
      else if (pod.engine !== undefined && pod.engine !== state.pod.engine) {
        state.pod = { ...pod }; // reconfigured: trust the configuration from the next scrape on
        state.expected = undefined; // and read a whole page of it before asking filtered
      }
    }
    for (const pod of pods) {
      if (this.#pods.has(pod.uid)) continue;
      const state: PodState = {
        pod: { ...pod },
        connection: undefined,
        health: { consecutiveFailures: 0, scrapes: 0, parseErrors: 0, filtered: false, pageBytes: 0 },
        telemetry: new PodTelemetry(this.#windows),
        inFlight: undefined,
        startedAt: 0,
        removed: false,
        filtered: undefined,
        expected: undefined,
        wholeUntil: 0,
      };
      this.#pods.set(pod.uid, state);
      if (this.running) this.#begin(state);
    }
  }

  start(): void {
    if (this.running) return;
    this.#ticker = setInterval(() => this.#tick(), this.intervalMs);
    for (const state of this.#pods.values()) this.#begin(state);
  }

  /** Stops scraping, aborts scrapes in flight and closes the connections. */
  async stop(): Promise<void> {
    if (!this.running) return;
    clearInterval(this.#ticker);
    this.#ticker = undefined;
    await Promise.all([...this.#pods.values()].map((state) => this.#cancel(state)));
  }

  pods(): Pod[] {
    return [...this.#pods.values()].map((s) => s.pod);
  }

  /** The pod as configured, with `engine` filled in once detected. */
  pod(uid: string): Pod | undefined {
    return this.#pods.get(uid)?.pod;
  }

  health(uid: string): PodHealth | undefined {
    const health = this.#pods.get(uid)?.health;
    return health && { ...health };
  }

  telemetry(uid: string): PodTelemetry | undefined {
    return this.#pods.get(uid)?.telemetry;
  }

  /** The last good scrape is older than `staleAfterMs` allows (or there is none, or the pod is unknown). */
  isStale(uid: string, now: number = this.#now()): boolean {
    const health = this.#pods.get(uid)?.health;
    if (health?.lastGoodAt === undefined) return true;
    return now - health.lastGoodAt > staleAfterMs(this, health.consecutiveFailures > 0, this.#staleAfterIntervals);
  }

  #remove(uid: string): void {
    const state = this.#pods.get(uid);
    if (state === undefined) return;
    state.removed = true;
    void this.#cancel(state);
    this.#pods.delete(uid);
  }

  /** Opens the pod's connection and scrapes it at once (the ticks take over from there). */
  #begin(state: PodState): void {
    state.connection = new ScrapeConnection({
      address: state.pod.address,
      ...this.#request,
      maxHeaderBytes: this.#maxHeaderBytes,
      // Below uvicorn's 5 s keep-alive, so we replace idle connections before the server closes
      // them (a server-side close racing our next request would cost a failed scrape).
      idleReuseMs: 4_000,
    });
    this.#scrape(state);
  }

  /** Stops the pod's scrape in flight and closes its connection. */
  #cancel(state: PodState): Promise<void> {
    state.inFlight?.cancel();
    state.inFlight = undefined;
    const connection = state.connection;
    state.connection = undefined;
    return connection?.close() ?? Promise.resolve();
  }

  #tick(): void {
    const now = performance.now();
    for (const state of this.#pods.values()) {
      const inFlight = state.inFlight;
      if (inFlight !== undefined && now - state.startedAt >= this.timeoutMs)
        inFlight.fail(`timed out after ${this.timeoutMs} ms`);
      if (state.inFlight === undefined) this.#scrape(state);
    }
  }

  #scrape(state: PodState): void {
    if (state.connection === undefined || state.removed) return;
    state.startedAt = performance.now();
    state.health.scrapes++;
    const request = this.#filteredRequest(state);
    this.#fetch(state, request === undefined ? WHOLE : { kind: 'filtered', request });
  }

  /** The filtered request to send now, if the pod's engine has one and it isn't resting after a refusal. */
  #filteredRequest(state: PodState): string | undefined {
    const engine = state.pod.engine;
    if (!this.#filter || engine === undefined || state.expected === undefined) return undefined;
    if (state.wholeUntil > 0 && performance.now() < state.wholeUntil) return undefined;
    if (state.filtered?.engine !== engine) {
      const target = filteredTarget(ADAPTERS[engine]);
      state.filtered = { engine, request: target === undefined ? undefined : state.connection?.request(target) };
    }
    return state.filtered.request;
  }

  #fetch(state: PodState, ask: Ask): void {
    const connection = state.connection;
    if (connection === undefined || state.removed) return;
    const known = state.pod.engine;
    const select = known === undefined ? ANY_ENGINE_SELECTOR : ADAPTERS[known].selector;
    const fetch = new PageFetch(
      select,
      this.#maxBodyBytes,
      (result) => {
        if (state.inFlight === fetch) state.inFlight = undefined;
        if ('page' in result) this.#read(state, result.page, result.bytes, known, ask);
        else if (ask.kind === 'filtered' && result.status !== 0) {
          // An error status for the filtered target (a proxy's 404, a server that refuses the query).
          this.#fetch(state, { kind: 'fallback', lacking: undefined });
        } else this.#fail(state, result.error);
      },
      (aborted) => connection.abort(aborted),
    );
    state.inFlight = fetch;
    if (ask.kind === 'filtered') connection.get(fetch, ask.request);
    else connection.get(fetch);
  }

  /** A page came: a filtered one is checked against the last whole one, a whole one becomes the reference. */
  #read(state: PodState, page: MetricPage, bytes: number, known: Engine | undefined, ask: Ask): void {
    if (ask.kind === 'filtered') {
      const expected = state.expected ?? [];
      let lacking: string[] | undefined;
      for (let k = 0; k < expected.length; k++) if (!page.has(expected[k])) (lacking ??= []).push(expected[k]);
      if (lacking !== undefined) {
        this.#fetch(state, { kind: 'fallback', lacking });
        return;
      }
    } else if (ask.kind === 'fallback') {
      // The filter is at fault when the whole page has what the filtered one lacked (else the page changed).
      const lacking = ask.lacking;
      if (lacking === undefined || lacking.some((name) => page.has(name)))
        state.wholeUntil = performance.now() + this.#filterRetryMs;
    }
    const filtered = ask.kind === 'filtered';
    // The reference is taken from the first whole page and after each fallback (while whole pages
    // rest the filter, the next try is checked against the page before; a change since costs one
    // more fallback, which takes a new reference).
    const refresh = ask.kind === 'fallback' || state.expected === undefined;
    if (this.#accept(state, page, known, { filtered, pageBytes: bytes }) && refresh) this.#remember(state, page);
  }

  /** From a whole page that produced a load: the adapter's samples it holds, when filtered scrapes may follow. */
  #remember(state: PodState, page: MetricPage): void {
    const engine = state.pod.engine;
    if (!this.#filter || engine === undefined || ADAPTERS[engine].filteredPath === undefined) return;
    state.expected = ADAPTERS[engine].selector.names().filter((name) => page.has(name));
  }

  /**
   * `known`: the engine the page was read for (its adapter's samples), if it was known; `asked`:
   * how (for the pod's health). Whether the page produced a load.
   */
  #accept(
    state: PodState,
    page: MetricPage,
    known: Engine | undefined,
    asked: Pick<PodHealth, 'filtered' | 'pageBytes'>,
  ): boolean {
    if (state.removed) return false;
    const at = this.#now();
    const engine = known ?? detectEngine(page);
    if (engine === undefined && page.errors > 0) {
      this.#fail(
        state,
        `not a metrics page (${page.errors} malformed lines, first: line ${page.diagnostics[0].line}: ${page.diagnostics[0].reason})`,
      );
      return false;
    }
    const result = toPodLoad(page, at, engine);
    if (!result.ok) {
      this.#fail(state, page.errors > 0 ? `${result.error} (${page.errors} malformed lines)` : result.error);
      return false;
    }
    const implausible = implausibility(result.load, state.telemetry.latest, this.#plausibility);
    if (implausible !== undefined) {
      this.#fail(state, `implausible page: ${implausible}`, 'implausible');
      return false;
    }
    if (state.pod.engine === undefined) state.pod = { ...state.pod, engine };
    state.health.lastGoodAt = at;
    state.health.consecutiveFailures = 0;
    state.health.parseErrors = page.errors;
    state.health.filtered = asked.filtered;
    state.health.pageBytes = asked.pageBytes;
    state.telemetry.record(result.load);
    try {
      this.#onLoad(state.pod, result.load, state.telemetry);
    } catch (err) {
      this.#report(state, `onLoad failed: ${describeError(err)}`);
    }
    return true;
  }

  #fail(state: PodState, error: string, kind: 'failed' | 'implausible' = 'failed'): void {
    if (state.removed) return;
    state.health.consecutiveFailures++;
    state.health.lastError = error;
    // The last numbers no longer describe the pod; don't let windows average them over the outage.
    state.telemetry.markUnknown(this.#now());
    this.#report(state, error, kind);
  }

  #report(state: PodState, error: string, kind: 'failed' | 'implausible' = 'failed'): void {
    try {
      this.#onError(state.pod, error, kind);
    } catch {
      // An error callback that throws has nowhere left to report to; the loop must go on.
    }
  }
}
