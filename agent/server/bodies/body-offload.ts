// Large request bodies judged off the event loop. Parsing, checking, classifying and measuring a
// 3 MB body took 30–200 ms of the agent's only JS thread (docs/benchmarks.md, "Soak"): every other request,
// probe and scrape waited behind it. Bodies of at least `limits.offloadBodyBytes` go to a small
// pool of worker threads (`limits.bodyWorkers`) that run the same code (body-work.ts), so the
// verdict is the same; the event loop only copies the bytes over and reads the answer. Workers
// start on the first large body and end after `idleMs` without one (their V8 heap goes back; glibc
// keeps part of what they allocated natively, measured in docs/benchmarks.md, "Soak").
// A worker that fails or dies never lets a body through unjudged: the agent judges that body
// itself, on the loop, as it would without workers.
import { Worker } from 'node:worker_threads';
import type { Classification } from '../../classify/classify.ts';
import type { DetectorSpec } from '../../classify/custom.ts';
import type { ScanLimits } from '../../classify/walk.ts';
import type { RequestKind, RouteRequest } from '../../types.ts';
import type { BodyJob, BodyVerdict } from './body-work.ts';
import type { Identity } from '../request-path/identify.ts';
import type { ParsedRequest } from './request.ts';
import type { AgentSettings } from '../../config/load.ts';
import type { Callers } from '../request-path/caller.ts';
import type { RequestPathDeps } from '../request-path/path-deps.ts';

export type { BodyVerdict } from './body-work.ts';

export interface BodyOffloadOptions {
  /** Bodies of at least this many bytes are judged on a worker thread. */
  minBytes: number;
  /** Worker threads at most, started as needed; 0: every body is judged on the event loop. */
  threads: number;
  /** A worker with nothing to do for this long ends. */
  idleMs: number;
  maxDepth: number;
  prefixMaxBlocks: number;
  scanLimits: ScanLimits;
  /** The platform's detectors as configured now (a new array after each reload). */
  detectorSpecs: () => readonly DetectorSpec[];
  log(level: 'warn', message: string): void;
  /** The worker's module (default body-worker.ts beside this file; tests give one that fails). */
  workerUrl?: URL;
}

interface Thread {
  worker: Worker;
  pending: Map<number, (verdict: BodyVerdict | undefined) => void>;
  specs: readonly DetectorSpec[] | undefined;
  idle: NodeJS.Timeout | undefined;
}

const WORKER_URL = new URL(import.meta.url.endsWith('.ts') ? './body-worker.ts' : './body-worker.js', import.meta.url);

export class BodyOffload {
  readonly #opts: BodyOffloadOptions;
  readonly #threads = new Set<Thread>();
  #nextId = 0;
  #closed = false;

  constructor(opts: BodyOffloadOptions) {
    this.#opts = opts;
  }

  /** Worker threads running now. */
  get threads(): number {
    return this.#threads.size;
  }

  /** Whether a body of this size goes to a worker (false once closed or without workers). */
  takes(byteLength: number): boolean {
    return !this.#closed && this.#opts.threads > 0 && byteLength >= this.#opts.minBytes;
  }

  /**
   * A large body's verdict from a worker; undefined when this body is the caller's to judge
   * (below the threshold, no workers, or the worker failed).
   */
  judge(kind: RequestKind, bytes: Uint8Array, headerTags: string | null): Promise<BodyVerdict | undefined> {
    const o = this.#opts;
    if (!this.takes(bytes.byteLength)) return Promise.resolve(undefined);
    const thread = this.#pick();
    const job: BodyJob = {
      kind,
      bytes,
      headerTags,
      maxDepth: o.maxDepth,
      prefixMaxBlocks: o.prefixMaxBlocks,
      scanLimits: o.scanLimits,
    };
    const specs = o.detectorSpecs();
    if (thread.specs !== specs) {
      thread.worker.postMessage({ detectors: specs });
      thread.specs = specs;
    }
    const id = this.#nextId++;
    clearTimeout(thread.idle);
    // The worker gets its own copy, moved rather than cloned: one memcpy here, where cloning
    // serialises through a growing buffer (measured: tens of MB of RSS kept after 3 MB bodies).
    // The request keeps the original to send on.
    const own = new Uint8Array(bytes.byteLength); // not bytes.slice(): on a Buffer that is a view
    own.set(bytes);
    return new Promise((resolve) => {
      thread.pending.set(id, resolve);
      thread.worker.postMessage({ id, job: { ...job, bytes: own } }, [own.buffer]);
    });
  }

  /** Ends the workers; bodies they were judging are judged by their callers. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#threads].map((t) => this.#end(t)));
  }

  /** The least busy worker, or a new one while all are busy and the pool has room. */
  #pick(): Thread {
    let best: Thread | undefined;
    for (const t of this.#threads) if (!best || t.pending.size < best.pending.size) best = t;
    if (best && (best.pending.size === 0 || this.#threads.size >= this.#opts.threads)) return best;
    return this.#start();
  }

  #start(): Thread {
    const worker = new Worker(this.#opts.workerUrl ?? WORKER_URL);
    worker.unref();
    const thread: Thread = { worker, pending: new Map(), specs: undefined, idle: undefined };
    this.#threads.add(thread);
    worker.on('message', (m: { id: number; verdict?: BodyVerdict; fault?: string }) => {
      const resolve = thread.pending.get(m.id);
      thread.pending.delete(m.id);
      if (m.fault !== undefined) this.#opts.log('warn', `body worker failed on a request body: ${m.fault}`);
      resolve?.(m.verdict);
      if (thread.pending.size === 0) {
        clearTimeout(thread.idle);
        thread.idle = setTimeout(() => thread.pending.size === 0 && void this.#end(thread), this.#opts.idleMs);
        thread.idle.unref();
      }
    });
    const gone = (why: string) => {
      if (!this.#threads.delete(thread)) return;
      clearTimeout(thread.idle);
      if (!this.#closed) this.#opts.log('warn', `body worker ended: ${why}`);
      for (const resolve of thread.pending.values()) resolve(undefined);
      thread.pending.clear();
    };
    worker.on('error', (error) => gone(String(error)));
    worker.on('exit', (code) => gone(`exit code ${code}`));
    return thread;
  }

  async #end(thread: Thread): Promise<void> {
    if (!this.#threads.delete(thread)) return;
    clearTimeout(thread.idle);
    for (const resolve of thread.pending.values()) resolve(undefined);
    thread.pending.clear();
    await thread.worker.terminate();
  }
}

/**
 * The parsed request of a body a worker judged: what routing reads comes from the verdict; the
 * body itself is parsed here only if something needs it (overflow to a provider re-serialises it).
 */
export function parsedFromVerdict(
  kind: RequestKind,
  bytes: Uint8Array,
  verdict: { model: string; stream: boolean },
): ParsedRequest {
  let body: Record<string, unknown> | undefined;
  return {
    kind,
    model: verdict.model,
    stream: verdict.stream,
    get body() {
      return (body ??= JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8')));
    },
  };
}

/** The routing input of a judged body for this caller. */
export function routeFromVerdict(
  verdict: { route: Omit<RouteRequest, 'tenant' | 'namespace' | 'tags'>; classification: Classification },
  identity: Identity,
): RouteRequest {
  return {
    ...verdict.route,
    tenant: identity.tenant,
    namespace: identity.namespace,
    tags: verdict.classification.tags,
  };
}

/** A worker with no body to judge for this long ends (memory back; the next large body starts one). */
const WORKER_IDLE_MS = 10_000;

/** The request path's large-body workers, from the agent's settings. */
export function bodyOffloadFor(
  settings: Pick<AgentSettings, 'limits'>,
  callers: Pick<Callers, 'detectorSpecs' | 'counted' | 'withForwardedHeaders'>,
  log: (level: 'warn', message: string) => void,
): NonNullable<RequestPathDeps['bodies']> {
  const { limits } = settings;
  const offload = new BodyOffload({
    minBytes: limits.offloadBodyBytes,
    threads: limits.bodyWorkers,
    idleMs: WORKER_IDLE_MS,
    maxDepth: limits.maxJsonDepth,
    prefixMaxBlocks: limits.prefixMaxBlocks,
    scanLimits: {
      maxDepth: limits.classifyMaxDepth,
      maxChars: limits.classifyMaxChars,
      maxNodes: limits.classifyMaxValues,
    },
    detectorSpecs: () => callers.detectorSpecs,
    log,
  });
  return {
    takes: (byteLength) => offload.takes(byteLength),
    judge: (kind, bytes, headerTags) => offload.judge(kind, bytes, headerTags),
    counted: (c, headers) => callers.counted(callers.withForwardedHeaders(c, headers)),
    close: () => offload.close(),
  };
}
