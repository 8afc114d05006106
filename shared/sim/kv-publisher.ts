// The simulator's KV-cache event publisher, speaking vLLM's wire format (--kv-events-config with
// publisher "zmq"): a PUB socket sending [topic, sequence as 8 bytes big-endian, msgpack batch]
// for each scheduler step that changed the prefix cache, and a ROUTER socket that replays the last
// `bufferSteps` batches from a requested sequence, then the end marker (sequence −1, empty payload).
// Batches and events are msgpack maps as vLLM's msgspec structs encode them today: the batch
// {ts, events, data_parallel_rank}, each event tagged by its class name under "type", block hashes
// as uint64 (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES). The engine (engine.ts) says what changed.
import { encode } from '@msgpack/msgpack';
import { Publisher, Router } from 'zeromq';
import type { SimKvEvent } from './engine.ts';

/** One batch's payload, byte for byte what vLLM's msgspec encoder would send for these events. */
export function encodeKvBatch(events: readonly SimKvEvent[], tsSeconds: number, dataParallelRank = 0): Uint8Array {
  return encode(
    {
      ts: tsSeconds,
      events: events.map((e) => {
        if (e.type === 'stored') {
          return {
            type: 'BlockStored',
            block_hashes: e.hashes,
            parent_block_hash: e.parent ?? null,
            token_ids: e.tokens,
            block_size: e.blockSize,
            lora_id: null,
            medium: 'GPU',
            lora_name: null,
            extra_keys: e.hashes.map(() => null),
            group_idx: 0,
            kv_cache_spec_kind: 'full_attention',
          };
        }
        if (e.type === 'removed') return { type: 'BlockRemoved', block_hashes: e.hashes, medium: 'GPU', group_idx: 0 };
        return { type: 'AllBlocksCleared' };
      }),
      data_parallel_rank: dataParallelRank,
    },
    // A whole-second ts must still go out as a float, as Python's float does.
    { forceFloat32: false, forceIntegerToFloat: false },
  );
}

export interface KvPublisherOptions {
  /** PUB address to bind, e.g. tcp://127.0.0.1:5557 (`*` as the port picks a free one). */
  endpoint: string;
  /** ROUTER address for replay requests; none: no replay. */
  replayEndpoint?: string;
  topic?: string;
  /** Batches kept for replay (vLLM's buffer_steps). Default 10,000. */
  bufferSteps?: number;
  /**
   * Test hook standing for a full high-water mark or a dropped connection: batches for which it
   * says true are numbered and kept for replay, but never sent live.
   */
  loseLive?: (seq: bigint) => boolean;
}

const END_SEQ = new Uint8Array(8).fill(0xff);

export class KvEventPublisher {
  readonly endpoint: string;
  readonly replayEndpoint: string | undefined;
  readonly #pub: Publisher;
  readonly #router: Router | undefined;
  readonly #topic: Uint8Array;
  readonly #bufferSteps: number;
  readonly #loseLive: KvPublisherOptions['loseLive'];
  readonly #buffer: { seq: bigint; payload: Uint8Array }[] = [];
  #next = 0n;
  /** Sends on one socket must not overlap: each waits for the one before. */
  #sending: Promise<void> = Promise.resolve();
  #closed = false;

  private constructor(pub: Publisher, router: Router | undefined, opts: KvPublisherOptions) {
    this.#pub = pub;
    this.#router = router;
    this.endpoint = pub.lastEndpoint ?? opts.endpoint;
    this.replayEndpoint = router?.lastEndpoint ?? undefined;
    this.#topic = new TextEncoder().encode(opts.topic ?? '');
    this.#bufferSteps = opts.bufferSteps ?? 10_000;
    this.#loseLive = opts.loseLive;
  }

  static async bind(opts: KvPublisherOptions): Promise<KvEventPublisher> {
    const pub = new Publisher({ sendHighWaterMark: 100_000, linger: 0 });
    await pub.bind(opts.endpoint);
    let router: Router | undefined;
    if (opts.replayEndpoint) {
      router = new Router({ linger: 0 });
      await router.bind(opts.replayEndpoint);
    }
    const publisher = new KvEventPublisher(pub, router, opts);
    if (router) void publisher.#serveReplays(router);
    return publisher;
  }

  /** Batches published so far (the next one's sequence). */
  get published(): bigint {
    return this.#next;
  }

  /** Publishes one step's events (the engine's onKvEvents), `at` in ms of engine time. */
  publish(events: readonly SimKvEvent[], at: number): void {
    if (this.#closed) return;
    this.publishPayload(encodeKvBatch(events, at / 1000));
  }

  /** Publishes an already-encoded batch (tests that send what a real engine captured). */
  publishPayload(payload: Uint8Array): bigint {
    const seq = this.#next++;
    this.#buffer.push({ seq, payload });
    if (this.#buffer.length > this.#bufferSteps) this.#buffer.shift();
    if (!this.#loseLive?.(seq)) {
      const frames = [this.#topic, seqBytes(seq), payload];
      this.#sending = this.#sending.then(() => (this.#closed ? undefined : this.#pub.send(frames))).catch(() => {});
    }
    return seq;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#sending;
    this.#pub.close();
    this.#router?.close();
  }

  async #serveReplays(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        // [identity, empty delimiter, start sequence], as a REQ or DEALER client sends it.
        if (frames.length !== 3 || frames[2].length !== 8) continue;
        const [id, , start] = frames;
        const from = new DataView(start.buffer, start.byteOffset, 8).getBigUint64(0, false);
        for (const { seq, payload } of [...this.#buffer]) {
          if (seq >= from) await router.send([id, new Uint8Array(0), seqBytes(seq), payload]);
        }
        await router.send([id, new Uint8Array(0), END_SEQ, new Uint8Array(0)]);
      }
    } catch {
      // The socket was closed: nothing more to serve.
    }
  }
}

function seqBytes(seq: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, seq, false);
  return out;
}
