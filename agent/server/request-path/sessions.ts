// Which pod served each session last, bounded: at most `maxSessions` (least recently used go
// first), each forgotten `ttlMs` after its last turn. The key comes from a header the platform
// names, else from the body's `user` (OpenAI chat, completions, responses) or `metadata.user_id`
// (Anthropic Messages).
import { LRUCache } from 'lru-cache';
import type { SessionSettings } from '../../types.ts';

/** Longest session key kept (longer ones are not sessions: no affinity). */
const MAX_KEY_LENGTH = 256;

export class SessionAffinity {
  readonly #settings: SessionSettings;
  readonly #pods: LRUCache<string, string>;

  constructor(settings: SessionSettings, now: () => number) {
    this.#settings = settings;
    // maxSize rather than max: lru-cache preallocates `max` slots up front.
    this.#pods = new LRUCache<string, string>({
      maxSize: settings.maxSessions,
      sizeCalculation: () => 1,
      ttl: settings.ttlMs,
      updateAgeOnGet: false,
      ttlResolution: 0, // read the injected clock each time, not a cached reading
      perf: { now },
    });
  }

  /** The request's session key, scoped to its tenant (one tenant's ids never reach another's pods). */
  keyOf(
    tenant: string,
    headers: { get(name: string): string | null | undefined },
    body: Record<string, unknown>,
  ): string | undefined {
    let key = headers.get(this.#settings.header) ?? undefined;
    if (!key && this.#settings.fromBody) {
      const userId = (body.metadata as { user_id?: unknown } | null | undefined)?.user_id;
      key =
        typeof body.user === 'string' ? `user:${body.user}` : typeof userId === 'string' ? `user:${userId}` : undefined;
    }
    if (!key || key.length > MAX_KEY_LENGTH) return undefined;
    return `${tenant}\u0000${key}`;
  }

  podOf(key: string | undefined): string | undefined {
    return key === undefined ? undefined : this.#pods.get(key);
  }

  served(key: string | undefined, podUid: string): void {
    if (key !== undefined) this.#pods.set(key, podUid);
  }

  get size(): number {
    return this.#pods.size;
  }
}
