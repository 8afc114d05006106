// The telemetry I/O shell: scrape each local model server's /metrics on a fixed interval and hand
// the parsed, engine-neutral load to the rest of the agent.
//
// One loop per pod, each scheduling its next scrape only after the previous one ended, so a slow
// pod is never scraped twice at once and never delays the others. All pods share one undici Agent
// with keep-alive: at 10–40 scrapes a second per pod, a TCP handshake per scrape would cost more
// than the scrape.

import { gunzip } from 'node:zlib';
import { promisify } from 'node:util';
import { Agent, request } from 'undici';
import type { Pod, PodLoad } from '../types.ts';
import { ADAPTERS, ANY_ENGINE_SELECTOR, detectEngine, toPodLoad } from './adapters.ts';
import { parsePromText } from './promtext.ts';
import { PodTelemetry } from './pod-telemetry.ts';
import { DEFAULT_PLAUSIBILITY, implausibility, type PlausibilityBounds } from './plausible.ts';
import type { WindowOptions } from './window.ts';
import { describeError } from '../../shared/describe-error.ts';

const gunzipAsync = promisify(gunzip);

export interface ScraperOptions {
  /** Time between the starts of two scrapes of one pod. */
  intervalMs?: number;
  /** Budget for one whole scrape (connect, headers, body); a hung pod costs one timeout per scrape. */
  timeoutMs?: number;
  /** Clock for `PodLoad.at`, health and staleness (ms). Scheduling itself uses real timers. */
  now?: () => number;
  /** A page larger than this is an error, not a memory problem. */
  maxBodyBytes?: number;
  /**
   * Ask for gzip. Off by default: model servers sit on the same node, where the bytes are cheap
   * and compressing a page 40 times a second is not. A gzipped answer is decoded either way.
   */
  gzip?: boolean;
  /** Windows kept per pod: the longest policy window and the resolution. */
  windows?: Partial<WindowOptions>;
  /** A pod whose last good scrape is older than this many intervals is stale. */
  staleAfterIntervals?: number;
  /** What a page may say before it is refused as implausible. */
  plausibility?: PlausibilityBounds;
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
}

export type OnLoad = (pod: Pod, load: PodLoad, telemetry: PodTelemetry) => void;
/** `implausible`: the page was read but its numbers cannot be believed (the pod lies or is broken). */
export type OnError = (pod: Pod, error: string, kind: 'failed' | 'implausible') => void;

interface PodState {
  pod: Pod;
  url: string;
  health: PodHealth;
  telemetry: PodTelemetry;
  timer: NodeJS.Timeout | undefined;
  inFlight: AbortController | undefined;
  removed: boolean;
}

/** A pod whose last good scrape is older than this many intervals is stale: for the scraper and the router alike. */
export const STALE_AFTER_INTERVALS = 2;

export function staleAfterMs(scrapeIntervalMs: number): number {
  return STALE_AFTER_INTERVALS * scrapeIntervalMs;
}

const DEFAULTS = { intervalMs: 100, timeoutMs: 1000, maxBodyBytes: 8 * 1024 * 1024 };

/** Marks an abort as ours (pod removed, scraper stopped) so it is not reported as a pod failure. */
const CANCELLED = new Error('cancelled');

export class Scraper {
  readonly intervalMs: number;
  readonly timeoutMs: number;
  readonly #now: () => number;
  readonly #maxBodyBytes: number;
  readonly #gzip: boolean;
  readonly #windows: Partial<WindowOptions>;
  readonly #staleAfterMs: number;
  readonly #plausibility: PlausibilityBounds;
  readonly #onLoad: OnLoad;
  readonly #onError: OnError;
  readonly #pods = new Map<string, PodState>();
  #agent: Agent | undefined;

  constructor(options: ScraperOptions, onLoad: OnLoad, onError: OnError) {
    this.intervalMs = options.intervalMs ?? DEFAULTS.intervalMs;
    this.timeoutMs = options.timeoutMs ?? DEFAULTS.timeoutMs;
    if (!(this.intervalMs > 0) || !(this.timeoutMs > 0))
      throw new Error('scrape interval and timeout must be positive');
    this.#now = options.now ?? Date.now;
    this.#maxBodyBytes = options.maxBodyBytes ?? DEFAULTS.maxBodyBytes;
    this.#gzip = options.gzip ?? false;
    this.#windows = options.windows ?? {};
    this.#staleAfterMs = (options.staleAfterIntervals ?? STALE_AFTER_INTERVALS) * this.intervalMs;
    this.#plausibility = options.plausibility ?? DEFAULT_PLAUSIBILITY;
    this.#onLoad = onLoad;
    this.#onError = onError;
  }

  get running(): boolean {
    return this.#agent !== undefined;
  }

  /** Replace the pod set: new pods start being scraped, missing ones stop (in-flight scrapes are aborted). */
  setPods(pods: readonly Pod[]): void {
    const next = new Map(pods.map((p) => [p.uid, p]));
    for (const [uid, state] of this.#pods) {
      const pod = next.get(uid);
      if (pod === undefined || pod.address !== state.pod.address) this.#remove(uid);
      else if (pod.engine !== undefined && pod.engine !== state.pod.engine) {
        state.pod = { ...pod }; // reconfigured: trust the configuration from the next scrape on
      }
    }
    for (const pod of pods) {
      if (this.#pods.has(pod.uid)) continue;
      const state: PodState = {
        pod: { ...pod },
        url: `http://${pod.address}/metrics`,
        health: { consecutiveFailures: 0, scrapes: 0, parseErrors: 0 },
        telemetry: new PodTelemetry(this.#windows),
        timer: undefined,
        inFlight: undefined,
        removed: false,
      };
      this.#pods.set(pod.uid, state);
      if (this.running) this.#schedule(state, 0);
    }
  }

  start(): void {
    if (this.running) return;
    this.#agent = new Agent({
      // Below uvicorn's 5 s keep-alive, so we close idle connections before the server does
      // (a server-side close racing our next request would cost a failed scrape).
      keepAliveTimeout: 4_000,
      keepAliveMaxTimeout: 4_000,
      connections: 2,
      connect: { timeout: this.timeoutMs },
    });
    for (const state of this.#pods.values()) this.#schedule(state, 0);
  }

  /** Stops every loop, aborts scrapes in flight and closes the connections. */
  async stop(): Promise<void> {
    const agent = this.#agent;
    if (agent === undefined) return;
    this.#agent = undefined;
    for (const state of this.#pods.values()) this.#cancel(state);
    await agent.destroy();
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

  /** No good scrape within the last `staleAfterIntervals` intervals (or never, or unknown pod). */
  isStale(uid: string, now: number = this.#now()): boolean {
    const lastGoodAt = this.#pods.get(uid)?.health.lastGoodAt;
    return lastGoodAt === undefined || now - lastGoodAt > this.#staleAfterMs;
  }

  #remove(uid: string): void {
    const state = this.#pods.get(uid);
    if (state === undefined) return;
    state.removed = true;
    this.#cancel(state);
    this.#pods.delete(uid);
  }

  #cancel(state: PodState): void {
    clearTimeout(state.timer);
    state.timer = undefined;
    state.inFlight?.abort(CANCELLED);
  }

  #schedule(state: PodState, delayMs: number): void {
    state.timer = setTimeout(() => {
      state.timer = undefined;
      void this.#loop(state);
    }, delayMs);
  }

  async #loop(state: PodState): Promise<void> {
    const agent = this.#agent;
    if (agent === undefined || state.removed) return;
    const started = performance.now();
    await this.#scrape(state, agent);
    // Fixed rate from the start of each scrape; a scrape longer than the interval delays the next
    // one instead of overlapping it.
    if (this.#agent === agent && !state.removed) {
      this.#schedule(state, Math.max(0, this.intervalMs - (performance.now() - started)));
    }
  }

  async #scrape(state: PodState, agent: Agent): Promise<void> {
    const controller = new AbortController();
    state.inFlight = controller;
    const timeoutError = new Error(`timed out after ${this.timeoutMs} ms`);
    const timer = setTimeout(() => controller.abort(timeoutError), this.timeoutMs);
    state.health.scrapes++;
    let text: string;
    try {
      text = await this.#fetch(state.url, agent, controller.signal);
    } catch (err) {
      if (controller.signal.reason === CANCELLED) return;
      this.#fail(state, controller.signal.reason === timeoutError ? timeoutError.message : describeError(err));
      return;
    } finally {
      clearTimeout(timer);
      if (state.inFlight === controller) state.inFlight = undefined; // a restart may have begun another
    }
    this.#accept(state, text);
  }

  async #fetch(url: string, agent: Agent, signal: AbortSignal): Promise<string> {
    const response = await request(url, {
      dispatcher: agent,
      signal,
      headers: {
        accept: 'text/plain;version=0.0.4;q=1, */*;q=0.1',
        'accept-encoding': this.#gzip ? 'gzip' : 'identity',
      },
    });
    const { statusCode, headers, body } = response;
    if (statusCode !== 200) {
      await body.dump(); // read the rest so the connection stays reusable
      throw new Error(`HTTP ${statusCode}`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of body) {
      size += (chunk as Buffer).length;
      if (size > this.#maxBodyBytes) {
        body.destroy();
        throw new Error(`page larger than ${this.#maxBodyBytes} bytes`);
      }
      chunks.push(chunk as Buffer);
    }
    let bytes = Buffer.concat(chunks, size);
    const encoding = String(headers['content-encoding'] ?? 'identity').toLowerCase();
    if (encoding === 'gzip' || encoding === 'x-gzip')
      bytes = await gunzipAsync(bytes, { maxOutputLength: this.#maxBodyBytes });
    else if (encoding !== 'identity') throw new Error(`unsupported content-encoding ${encoding}`);
    return bytes.toString('utf8');
  }

  #accept(state: PodState, text: string): void {
    if (state.removed) return;
    const at = this.#now();
    const known = state.pod.engine;
    const page = parsePromText(text, known === undefined ? ANY_ENGINE_SELECTOR : ADAPTERS[known].selector);
    const engine = known ?? detectEngine(page);
    if (engine === undefined && page.errors > 0) {
      this.#fail(
        state,
        `not a metrics page (${page.errors} malformed lines, first: line ${page.diagnostics[0].line}: ${page.diagnostics[0].reason})`,
      );
      return;
    }
    const result = toPodLoad(page, at, engine);
    if (!result.ok) {
      this.#fail(state, page.errors > 0 ? `${result.error} (${page.errors} malformed lines)` : result.error);
      return;
    }
    const implausible = implausibility(result.load, state.telemetry.latest, this.#plausibility);
    if (implausible !== undefined) {
      this.#fail(state, `implausible page: ${implausible}`, 'implausible');
      return;
    }
    if (state.pod.engine === undefined) state.pod = { ...state.pod, engine };
    state.health.lastGoodAt = at;
    state.health.consecutiveFailures = 0;
    state.health.parseErrors = page.errors;
    state.telemetry.record(result.load);
    try {
      this.#onLoad(state.pod, result.load, state.telemetry);
    } catch (err) {
      this.#report(state, `onLoad failed: ${describeError(err)}`);
    }
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
