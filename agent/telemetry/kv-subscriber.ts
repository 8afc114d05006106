// Subscribes to one local pod's KV-cache event stream (vLLM --kv-events-config, ZMQ) and keeps the
// precise prefix index in step with it. The shell: the `zeromq` package's SUB socket for the live
// stream and a DEALER for the replay socket; the decoding (agent/prefix/kv-events.ts), the ordering
// and gap handling (agent/prefix/kv-stream.ts) and the index (agent/prefix/precise-index.ts) are
// pure. A batch that cannot be decoded counts as lost: the stream replays or resyncs past it.
import { Dealer, Subscriber } from 'zeromq';
import { decodeBatch, decodeSequence, encodeSequence, DEFAULT_MAX_PAYLOAD_BYTES } from '../prefix/kv-events.ts';
import { KvStream, type KvStreamStats, type StreamAction } from '../prefix/kv-stream.ts';
import type { PreciseIndex } from '../prefix/precise-index.ts';

export interface KvSubscriberOptions {
  podId: string;
  /** The pod's PUB address, e.g. tcp://10.0.0.7:5557. */
  endpoint: string;
  /** Its replay (ROUTER) address; without one every gap clears the pod's index. */
  replayEndpoint?: string;
  /** vLLM's `topic` (default ""). */
  topic?: string;
  /** How long a replay may take before the stream resyncs without it. Default 2,000 ms. */
  replayTimeoutMs?: number;
  maxPayloadBytes?: number;
  maxHeldBatches?: number;
  now?: () => number;
  log?: (message: string) => void;
}

export interface KvSubscriberStatus {
  podId: string;
  endpoint: string;
  /** In step: a first batch or replay has been applied and no resync is under way. */
  synced: boolean;
  expected: string | undefined;
  stats: KvStreamStats & { undecodable: number; lastBatchAt: number | undefined };
}

export class KvSubscriber {
  readonly #opts: KvSubscriberOptions;
  readonly #index: PreciseIndex;
  readonly #stream: KvStream;
  readonly #sub = new Subscriber({ linger: 0 });
  #replaySocket: Dealer | undefined;
  #replayTimer: NodeJS.Timeout | undefined;
  #synced = false;
  #undecodable = 0;
  #lastBatchAt: number | undefined;
  #closed = false;
  /** Actions run one at a time, in order: a replay's batches never interleave with live ones. */
  #queue: Promise<void> = Promise.resolve();

  constructor(opts: KvSubscriberOptions, index: PreciseIndex) {
    this.#opts = opts;
    this.#index = index;
    this.#stream = new KvStream({ replay: opts.replayEndpoint !== undefined, maxHeldBatches: opts.maxHeldBatches });
  }

  /** Connects and starts applying; resolves once subscribed (the first batches follow). */
  start(): void {
    this.#sub.connect(this.#opts.endpoint);
    this.#sub.subscribe(this.#opts.topic ?? '');
    this.#run(this.#stream.start());
    void this.#readLive();
  }

  status(): KvSubscriberStatus {
    return {
      podId: this.#opts.podId,
      endpoint: this.#opts.endpoint,
      synced: this.#synced,
      expected: this.#stream.expected?.toString(),
      stats: { ...this.#stream.stats, undecodable: this.#undecodable, lastBatchAt: this.#lastBatchAt },
    };
  }

  /** Whether the index reflects this pod now (the router falls back to the approximate index if not). */
  get synced(): boolean {
    return this.#synced && !this.#stream.replaying;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#replayTimer);
    this.#sub.close();
    this.#replaySocket?.close();
    await this.#queue;
  }

  async #readLive(): Promise<void> {
    try {
      for await (const frames of this.#sub) {
        if (frames.length !== 3) continue;
        const seq = decodeSequence(frames[1]);
        if (seq === undefined) continue;
        const batch = decodeBatch(frames[2], this.#opts.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES);
        if (!batch.ok) {
          // Treated as never received: the next batch shows the gap and replay fetches it again.
          this.#undecodable++;
          this.#opts.log?.(`kv events ${this.#opts.podId}: batch ${seq} refused: ${batch.error}`);
          continue;
        }
        this.#run(this.#stream.live(seq, batch.value));
      }
    } catch (err) {
      if (!this.#closed) this.#opts.log?.(`kv events ${this.#opts.podId}: ${(err as Error).message}`);
    }
  }

  #run(actions: StreamAction[]): void {
    for (const action of actions) {
      if (action.do === 'apply') {
        this.#index.apply(this.#opts.podId, action.batch);
        this.#lastBatchAt = this.#opts.now?.() ?? Date.now();
        this.#synced = true;
      } else if (action.do === 'clear') {
        this.#opts.log?.(`kv events ${this.#opts.podId}: resync (${action.reason})`);
        this.#index.clear(this.#opts.podId);
      } else {
        this.#queue = this.#queue.then(() => this.#replay(action.from));
      }
    }
  }

  /** Asks the replay socket for every batch from `from`, feeding them to the stream in order. */
  async #replay(from: bigint): Promise<void> {
    if (this.#closed || !this.#opts.replayEndpoint) return;
    const dealer = new Dealer({ linger: 0 });
    this.#replaySocket = dealer;
    this.#replayTimer = setTimeout(() => {
      dealer.close();
      if (!this.#closed) this.#run(this.#stream.replayTimedOut());
    }, this.#opts.replayTimeoutMs ?? 2000);
    try {
      dealer.connect(this.#opts.replayEndpoint);
      await dealer.send([new Uint8Array(0), encodeSequence(from)]);
      for await (const frames of dealer) {
        // [empty delimiter, sequence, payload]; the sequence −1 ends the replay.
        if (frames.length !== 3) continue;
        const seq = decodeSequence(frames[1]);
        if (seq === undefined) continue;
        if (seq < 0n) {
          clearTimeout(this.#replayTimer);
          this.#run(this.#stream.replayEnded());
          break;
        }
        const batch = decodeBatch(frames[2], this.#opts.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES);
        if (!batch.ok) {
          this.#undecodable++;
          continue;
        }
        this.#run(this.#stream.replayed(seq, batch.value));
      }
    } catch {
      // Closed by the timeout (already handled) or at shutdown.
    } finally {
      clearTimeout(this.#replayTimer);
      dealer.close();
      if (this.#replaySocket === dealer) this.#replaySocket = undefined;
    }
  }
}
