// The KV-event subscribers of this node's pods, one per pod that publishes events, kept in step
// with discovery; and the tokenizers that let a request be looked up in what they report. This is
// the shell the agent wires: it owns the sockets (kv-subscriber.ts) and reads the tokenizer files,
// the precise index and the tokenizer themselves are pure (agent/prefix/).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PreciseIndex } from '../prefix/precise-index.ts';
import { PromptTokenizer } from '../prefix/tokenizer.ts';
import type { Pod } from '../types.ts';
import { KvSubscriber, type KvSubscriberStatus } from './kv-subscriber.ts';

export class KvEventFeeds {
  readonly index: PreciseIndex;
  readonly #subscribers = new Map<string, { key: string; subscriber: KvSubscriber }>();
  readonly #log: (message: string) => void;
  readonly #limits: { replayTimeoutMs?: number; maxHeldBatches?: number };

  constructor(opts: {
    maxBlocksPerPod?: number;
    replayTimeoutMs?: number;
    maxHeldBatches?: number;
    log: (message: string) => void;
  }) {
    this.index = new PreciseIndex({ maxBlocksPerPod: opts.maxBlocksPerPod });
    this.#log = opts.log;
    this.#limits = { replayTimeoutMs: opts.replayTimeoutMs, maxHeldBatches: opts.maxHeldBatches };
  }

  /** Follows discovery: a subscriber for each pod with KV-event endpoints; gone pods are forgotten. */
  setPods(pods: readonly Pod[]): void {
    const next = new Map(pods.filter((p) => p.kvEvents).map((p) => [p.uid, p]));
    for (const [uid, entry] of this.#subscribers) {
      const pod = next.get(uid);
      if (pod && keyOf(pod) === entry.key) continue;
      void entry.subscriber.close();
      this.#subscribers.delete(uid);
      this.index.forget(uid);
    }
    for (const [uid, pod] of next) {
      if (this.#subscribers.has(uid)) continue;
      const subscriber = new KvSubscriber(
        { podId: uid, ...pod.kvEvents!, ...this.#limits, log: this.#log },
        this.index,
      );
      subscriber.start();
      this.#subscribers.set(uid, { key: keyOf(pod), subscriber });
    }
  }

  /** Whether `uid`'s index is in step with its engine (else the approximate index decides for it). */
  synced(uid: string): boolean {
    return this.#subscribers.get(uid)?.subscriber.synced ?? false;
  }

  status(): KvSubscriberStatus[] {
    return [...this.#subscribers.values()].map((s) => s.subscriber.status());
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#subscribers.values()].map((s) => s.subscriber.close()));
    this.#subscribers.clear();
  }
}

function keyOf(pod: Pod): string {
  return JSON.stringify(pod.kvEvents);
}

/**
 * Model → its tokenizer, from directories holding tokenizer.json and tokenizer_config.json. A
 * directory that cannot be read is reported and skipped (that model stays on the approximate index).
 */
export function loadTokenizers(
  dirs: Record<string, string>,
  log: (message: string) => void,
): Map<string, PromptTokenizer> {
  const out = new Map<string, PromptTokenizer>();
  for (const [model, dir] of Object.entries(dirs)) {
    try {
      const read = (name: string) => JSON.parse(readFileSync(join(dir, name), 'utf8')) as Record<string, unknown>;
      out.set(model, new PromptTokenizer({ tokenizer: read('tokenizer.json'), config: read('tokenizer_config.json') }));
    } catch (err) {
      log(`tokenizer for ${model} at ${dir}: ${(err as Error).message}; the approximate prefix index decides for it`);
    }
  }
  return out;
}
