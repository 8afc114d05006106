// Large request bodies judged off the event loop. Parsing, checking, classifying and measuring a
// 3 MB body took 30–200 ms of the agent's only JS thread (README "Soak"): every other request,
// probe and scrape waited behind it. Bodies of at least `limits.offloadBodyBytes` go to a small
// pool of body workers (`limits.bodyWorkers`) that run the same code (body-work.ts), so the
// verdict is the same; the event loop only hands the bytes over and reads the answer.
// A worker is a child process by default (`limits.bodyWorkerKind: process`): it starts on the
// first large body and exits after `idleMs` without one, and everything it allocated goes back to
// the OS with it. A worker thread (`thread`) starts faster and costs less while it lives, but
// allocates natively from the arenas the event loop uses, and glibc keeps what it frees there
// (npm run soak: the main heap +9 MB after the large bodies, all of it free; README "Soak").
// A worker that fails, dies, hangs or cannot start never lets a body through unjudged: the agent
// judges that body itself, on the loop, as it would without workers.
import { fork, type ChildProcess } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import type { Classification } from '../classify/classify.ts';
import type { DetectorSpec } from '../classify/custom.ts';
import type { ScanLimits } from '../classify/walk.ts';
import type { RequestKind, RouteRequest } from '../types.ts';
import type { BodyJob, BodyVerdict } from './body-work.ts';
import type { Identity } from './identify.ts';
import type { ParsedRequest } from './request.ts';
import type { AgentSettings } from '../config/load.ts';
import type { Callers } from './caller.ts';
import type { RequestPathDeps } from './path-deps.ts';

export type { BodyVerdict } from './body-work.ts';

/** Where a body worker runs: a child process of the agent's own node, or a thread. */
export type BodyWorkerKind = 'process' | 'thread';

export interface BodyOffloadOptions {
  /** Bodies of at least this many bytes are judged by a worker. */
  minBytes: number;
  /** Workers at most, started as needed; 0: every body is judged on the event loop. */
  threads: number;
  kind?: BodyWorkerKind;
  /** A worker with nothing to do for this long ends. */
  idleMs: number;
  /** A worker not ready this long after it was started is ended; its bodies go to the loop. */
  startTimeoutMs?: number;
  /** A body without a verdict this long after it was handed over: the worker is ended, the body goes to the loop. */
  judgeTimeoutMs?: number;
  maxDepth: number;
  prefixMaxBlocks: number;
  scanLimits: ScanLimits;
  /** The platform's detectors as configured now (a new array after each reload). */
  detectorSpecs: () => readonly DetectorSpec[];
  log(level: 'warn', message: string): void;
  /** The worker's module (default body-worker.ts beside this file; tests give one that fails). */
  workerUrl?: URL;
}

/** Messages from a worker: it is listening, or one body's verdict (or our fault on it). */
type FromWorker = { ready: true } | { id: number; verdict?: BodyVerdict; fault?: string };
type ToWorker = { detectors: readonly DetectorSpec[] } | { id: number; job: BodyJob };

/** One worker, whichever kind: how to send it a message and end it, and its events. */
interface Channel {
  send(message: ToWorker, transfer?: ArrayBuffer): void;
  end(): Promise<void>;
  /** The worker's process id (process workers only): the soak counts its memory. */
  pid?: number;
}

interface Thread {
  channel: Channel;
  ready: boolean;
  /** Messages held until the worker says it listens (a child's IPC drops what comes earlier). */
  queued: { message: ToWorker; transfer?: ArrayBuffer }[];
  pending: Map<number, { resolve: (verdict: BodyVerdict | undefined) => void; timer: NodeJS.Timeout }>;
  specs: readonly DetectorSpec[] | undefined;
  idle: NodeJS.Timeout | undefined;
  start: NodeJS.Timeout | undefined;
}

const WORKER_URL = new URL(import.meta.url.endsWith('.ts') ? './body-worker.ts' : './body-worker.js', import.meta.url);

/** Node flags a worker process does not take from the agent's (test runner, debugger, watch mode, preloads). */
const NOT_FOR_WORKERS =
  /^--(test|experimental-test|inspect|debug|watch|eval|print|input-type|env-file|import|require|loader|experimental-loader)/;

/** The environment a worker process gets: the allocator's and Node's settings, none of the agent's secrets. */
function workerEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(env).filter(([k]) => /^(MALLOC_\w+|GLIBC_TUNABLES|NODE_ENV|NODE_OPTIONS|TZ)$/.test(k)),
  );
}

export class BodyOffload {
  readonly #opts: BodyOffloadOptions;
  readonly #threads = new Set<Thread>();
  #nextId = 0;
  #closed = false;

  constructor(opts: BodyOffloadOptions) {
    this.#opts = opts;
  }

  /** Workers running now. */
  get threads(): number {
    return this.#threads.size;
  }

  /** Process ids of the worker processes running now. */
  get pids(): number[] {
    return [...this.#threads].flatMap((t) => (t.channel.pid === undefined ? [] : [t.channel.pid]));
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
    const specs = o.detectorSpecs();
    if (thread.specs !== specs) {
      this.#send(thread, { detectors: specs });
      thread.specs = specs;
    }
    const id = this.#nextId++;
    clearTimeout(thread.idle);
    // A thread gets its own copy, moved rather than cloned: one memcpy here, where cloning
    // serialises through a growing buffer (measured: tens of MB of RSS kept after 3 MB bodies).
    // A process gets the view's bytes serialised into its channel. The request keeps the
    // original to send on.
    let own = bytes;
    if ((o.kind ?? 'process') === 'thread') {
      own = new Uint8Array(bytes.byteLength); // not bytes.slice(): on a Buffer that is a view
      own.set(bytes);
    }
    const job: BodyJob = {
      kind,
      bytes: own,
      headerTags,
      maxDepth: o.maxDepth,
      prefixMaxBlocks: o.prefixMaxBlocks,
      scanLimits: o.scanLimits,
    };
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        o.log('warn', `body worker gave no verdict within ${o.judgeTimeoutMs ?? JUDGE_TIMEOUT_MS} ms: ended`);
        void this.#end(thread);
      }, o.judgeTimeoutMs ?? JUDGE_TIMEOUT_MS);
      timer.unref();
      thread.pending.set(id, { resolve, timer });
      this.#send(thread, { id, job }, own === bytes ? undefined : (own.buffer as ArrayBuffer));
    });
  }

  /** Ends the workers; bodies they were judging are judged by their callers. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#threads].map((t) => this.#end(t)));
  }

  #send(thread: Thread, message: ToWorker, transfer?: ArrayBuffer): void {
    if (thread.ready) thread.channel.send(message, transfer);
    else thread.queued.push({ message, transfer });
  }

  /** The least busy worker, or a new one while all are busy and the pool has room. */
  #pick(): Thread {
    let best: Thread | undefined;
    for (const t of this.#threads) if (!best || t.pending.size < best.pending.size) best = t;
    if (best && (best.pending.size === 0 || this.#threads.size >= this.#opts.threads)) return best;
    return this.#start();
  }

  #start(): Thread {
    const o = this.#opts;
    const url = o.workerUrl ?? WORKER_URL;
    const thread: Thread = {
      channel: undefined as unknown as Channel,
      ready: false,
      queued: [],
      pending: new Map(),
      specs: undefined,
      idle: undefined,
      start: undefined,
    };
    const onMessage = (m: FromWorker) => {
      if ('ready' in m) {
        thread.ready = true;
        clearTimeout(thread.start);
        for (const q of thread.queued.splice(0)) thread.channel.send(q.message, q.transfer);
        return;
      }
      const job = thread.pending.get(m.id);
      thread.pending.delete(m.id);
      clearTimeout(job?.timer);
      if (m.fault !== undefined) o.log('warn', `body worker failed on a request body: ${m.fault}`);
      job?.resolve(m.verdict);
      if (thread.pending.size === 0) {
        clearTimeout(thread.idle);
        thread.idle = setTimeout(() => thread.pending.size === 0 && void this.#end(thread), o.idleMs);
        thread.idle.unref();
      }
    };
    const gone = (why: string) => {
      if (!this.#threads.has(thread)) return;
      if (!this.#closed) o.log('warn', `body worker ended: ${why}`);
      void this.#end(thread);
    };
    thread.channel =
      (o.kind ?? 'process') === 'thread' ? threadChannel(url, onMessage, gone) : processChannel(url, onMessage, gone);
    this.#threads.add(thread);
    thread.start = setTimeout(() => {
      o.log('warn', `body worker not ready within ${o.startTimeoutMs ?? START_TIMEOUT_MS} ms: ended`);
      void this.#end(thread);
    }, o.startTimeoutMs ?? START_TIMEOUT_MS);
    thread.start.unref();
    return thread;
  }

  async #end(thread: Thread): Promise<void> {
    if (!this.#threads.delete(thread)) return;
    clearTimeout(thread.idle);
    clearTimeout(thread.start);
    thread.queued.length = 0;
    for (const job of thread.pending.values()) {
      clearTimeout(job.timer);
      job.resolve(undefined);
    }
    thread.pending.clear();
    await thread.channel.end();
  }
}

/** A worker thread. */
function threadChannel(url: URL, onMessage: (m: FromWorker) => void, gone: (why: string) => void): Channel {
  const worker = new Worker(url);
  worker.unref();
  worker.on('message', onMessage);
  worker.on('error', (error) => gone(String(error)));
  worker.on('exit', (code) => gone(`exit code ${code}`));
  return {
    send: (message, transfer) => worker.postMessage(message, transfer ? [transfer] : []),
    end: async () => void (await worker.terminate()),
  };
}

/**
 * A worker process: the agent's own node binary (process.execPath: in the image /nodejs/bin/node,
 * no shell involved) with the agent's node flags, over an IPC channel that carries bytes as bytes
 * (`advanced` serialisation). It exits when the channel closes, so it never outlives the agent.
 */
function processChannel(url: URL, onMessage: (m: FromWorker) => void, gone: (why: string) => void): Channel {
  const child: ChildProcess = fork(url, [], {
    execArgv: process.execArgv.filter((a) => !NOT_FOR_WORKERS.test(a)),
    env: workerEnv(process.env),
    serialization: 'advanced',
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  child.unref();
  // The channel must not keep the agent alive either (it is ended on close).
  (child.channel as { unref?: () => void } | undefined)?.unref?.();
  child.on('message', (m) => onMessage(m as FromWorker));
  child.on('error', (error) => gone(String(error)));
  child.on('exit', (code, signal) => gone(signal ? `signal ${signal}` : `exit code ${code}`));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    pid: child.pid,
    send: (message) => {
      // A channel that is closing refuses (the 'exit' that follows leaves the body to the loop).
      if (child.connected) child.send(message, (error: Error | null) => error && gone(String(error)));
    },
    end: async () => {
      // Never started (spawn failed: no 'exit' follows), already gone, or gone by now.
      if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
      if (child.kill('SIGKILL')) await exited;
    },
  };
}

/** A worker with no body to judge for this long ends (memory back; the next large body starts one). */
const WORKER_IDLE_MS = 10_000;
/** Long enough for a worker process to start on a loaded node (measured: README "Soak"). */
const START_TIMEOUT_MS = 10_000;
/** A 3 MB body takes 20–200 ms to judge: a worker this late is stuck, not slow. */
const JUDGE_TIMEOUT_MS = 10_000;

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

/** The request path's large-body workers, from the agent's settings. */
export function bodyOffloadFor(
  settings: Pick<AgentSettings, 'limits'>,
  callers: Pick<Callers, 'detectorSpecs' | 'counted'>,
  log: (level: 'warn', message: string) => void,
): NonNullable<RequestPathDeps['bodies']> {
  const { limits } = settings;
  const offload = new BodyOffload({
    minBytes: limits.offloadBodyBytes,
    threads: limits.bodyWorkers,
    kind: limits.bodyWorkerKind,
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
    counted: (c) => callers.counted(c),
    close: () => offload.close(),
  };
}
