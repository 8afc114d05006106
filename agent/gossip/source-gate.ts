// The first check on a gossip datagram, before its HMAC is computed: is the source address one of
// our peers, and is it within its rate? A forged flood then costs a map lookup per datagram
// instead of a SHA-256 over it. Pure: the clock comes in. The HMAC still decides authenticity;
// this only decides whether a datagram is worth authenticating.
import { isIP } from 'node:net';

export type GateDrop = 'unknown-source' | 'rate-limited';

export interface SourceGateOptions {
  /** Datagrams per second one source address may send (a burst of one second is allowed). */
  maxPerSecond: number;
  /** Addresses remembered for rate limiting when sources are not restricted to known peers. */
  maxSources?: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

export class SourceGate {
  readonly #rate: number;
  readonly #maxSources: number;
  readonly #buckets = new Map<string, Bucket>();
  /** Peer addresses; undefined when peers are named by hostname (no address to compare with). */
  #known: Set<string> | undefined;

  constructor(options: SourceGateOptions) {
    this.#rate = options.maxPerSecond;
    this.#maxSources = options.maxSources ?? 4096;
  }

  /** Peers as `host:port`; only literal addresses can restrict sources. */
  setPeers(peers: readonly string[]): void {
    const hosts = peers.map((p) => p.slice(0, p.lastIndexOf(':')).replace(/^\[|\]$/g, ''));
    this.#known = hosts.length > 0 && hosts.every((h) => isIP(h) !== 0) ? new Set(hosts) : undefined;
    for (const address of this.#buckets.keys())
      if (this.#known && !this.#known.has(address)) this.#buckets.delete(address);
  }

  /** Undefined: go on and authenticate it; otherwise why it is dropped unread. */
  admit(address: string, now: number): GateDrop | undefined {
    if (this.#known && !this.#known.has(address)) return 'unknown-source';
    let bucket = this.#buckets.get(address);
    if (bucket === undefined) {
      // Without a peer list anyone may be a source: bound the memory a spoofed-address flood can take.
      if (this.#buckets.size >= this.#maxSources) this.#buckets.clear();
      bucket = { tokens: this.#rate, at: now };
      this.#buckets.set(address, bucket);
    }
    bucket.tokens = Math.min(this.#rate, bucket.tokens + ((now - bucket.at) / 1000) * this.#rate);
    bucket.at = now;
    if (bucket.tokens < 1) return 'rate-limited';
    bucket.tokens -= 1;
    return undefined;
  }
}
