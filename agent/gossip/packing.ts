// Budgeted packing: what fits into one datagram. Digests list as many origins as their byte
// budget allows (a complete shard of the id space among them); deltas carry whole version
// groups up to a byte limit. Pure; the versioning it packs lives in state.ts.
import type { OriginRecord, PodRecord } from './records.ts';
import { varintSize } from '../../shared/varint.ts';
import { type DigestWire, type OriginDeltaWire } from './wire.ts';
import { deltaHeaderSize, fieldSize } from './wire-size.ts';

// Bytes a digest spends beyond its entries: three packed-array prefixes and the shard fields.
const DIGEST_FRAMING = 3 * 3 + 2 * 6;
const DIGEST_ENTRY_ID = 4;
/** An entry's id plus a typical version and lag: what a shard is sized by. */
const TYPICAL_ENTRY = DIGEST_ENTRY_ID + 3;

export const emptyDigest = (): DigestWire => ({ origins: [], versions: [], dataLag: [], shard: 0, shards: 0 });

export function pushEntry(d: DigestWire, id: number, version: number, lag?: number): void {
  d.origins.push(id);
  d.versions.push(version);
  if (lag !== undefined) d.dataLag.push(lag);
}

/** Every one of `count` origins fits a digest within `budget` bytes. */
export function wholeFits(count: number, budget: number): boolean {
  return count * TYPICAL_ENTRY <= budget;
}

const entryCost = (o: OriginRecord) => DIGEST_ENTRY_ID + varintSize(o.version) + varintSize(o.version - o.dataVersion);

/** A digest filled under byte limits: each origin listed once, in the order offered. */
export class DigestPacker {
  readonly digest = emptyDigest();
  readonly #listed = new Set<number>();
  #used = DIGEST_FRAMING;

  readonly maxBytes: number;

  constructor(maxBytes: number) {
    this.maxBytes = maxBytes;
  }

  /** Bytes the digest takes so far. */
  get used(): number {
    return this.#used;
  }

  /** Lists `o` unless the digest would pass `limit` bytes; true when it is listed (or already was). */
  add(o: OriginRecord, limit: number): boolean {
    if (this.#listed.has(o.id)) return true;
    const cost = entryCost(o);
    if (this.#used + cost > limit) return false;
    this.#listed.add(o.id);
    this.#used += cost;
    pushEntry(this.digest, o.id, o.version, o.version - o.dataVersion);
    return true;
  }

  /**
   * The complete shard `cursor` of the smallest shard count whose members not yet listed fit
   * `budget`. `ids` are every origin's id, sorted ascending.
   */
  addShard(ids: readonly number[], get: (id: number) => OriginRecord, cursor: number, budget: number): void {
    let shards = 1;
    while (shards < 1 << 16 && (ids.length / shards) * TYPICAL_ENTRY > budget) shards *= 2;
    for (; shards <= 1 << 16; shards *= 2) {
      const shard = cursor % shards;
      const members = shardMembers(ids, shard, shards).map(get);
      let extra = 0;
      for (const o of members) if (!this.#listed.has(o.id)) extra += entryCost(o);
      if (extra > budget) continue;
      for (const o of members) this.add(o, this.maxBytes);
      this.digest.shard = shard;
      this.digest.shards = shards;
      return;
    }
  }
}

/** Ids whose top bits are `shard` of `shards` (a power of two): a contiguous range of `ids`. */
export function shardMembers(ids: readonly number[], shard: number, shards: number): readonly number[] {
  const width = 2 ** 32 / shards;
  return ids.slice(lowerBound(ids, shard * width), lowerBound(ids, (shard + 1) * width));
}

function lowerBound(sorted: readonly number[], value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export interface WrittenDelta {
  delta: OriginDeltaWire;
  /** Bytes the delta adds to a payload. */
  fieldSize: number;
  /** Everything newer than `since` is in it; otherwise continue from delta.to. */
  done: boolean;
}

/**
 * A delta for `origin` from `since`, at most `maxBytes` as a payload field: whole version
 * groups in version order, so a receiver that applies it holds exactly `to`. Undefined when not
 * even the first group fits. `continuesFull`: `since` is the end of a full state just sent.
 */
export function writeDelta(
  origin: OriginRecord,
  since: number,
  maxBytes: number,
  now: number,
  continuesFull = false,
): WrittenDelta | undefined {
  const full = since === 0 || (since < origin.floor && !continuesFull);
  const from = full ? 0 : since;
  const withInfo = (r: PodRecord) => !r.entry.removed && (full || continuesFull || r.infoVersion > from);
  const header: OriginDeltaWire = {
    origin: origin.id,
    from,
    to: origin.version,
    ageMs: Math.min(Math.max(0, Math.round(now - origin.lastAdvance)), 0xffffffff),
    node: full ? origin.node : '',
    incarnation: full ? origin.incarnation : 0,
    floor: full || continuesFull ? origin.floor : 0,
    continuesFull: continuesFull && !full,
    pods: [],
    agent: full ? origin.agent : '',
    // A signing origin's stamp goes with every delta, relayed as the origin made it.
    ...(full && origin.keyRaw ? { key: origin.keyRaw } : {}),
    ...(origin.stamp ? { stamp: origin.stamp } : {}),
  };
  const headerSize = deltaHeaderSize(header);
  const entries = from >= origin.dataVersion ? [] : [...origin.pods.values()].filter((r) => r.entry.version > from);
  entries.sort((a, b) => a.entry.version - b.entry.version);

  // 3 bytes: the payload field's tag and length prefix, for deltas under 16 KiB.
  let used = 3 + headerSize;
  if (used > maxBytes) return undefined;
  let entriesBytes = 0;
  let included = 0;
  for (let i = 0; i < entries.length;) {
    const version = entries[i].entry.version;
    let j = i;
    let groupBytes = 0;
    for (; j < entries.length && entries[j].entry.version === version; j++) {
      const r = entries[j];
      groupBytes += fieldSize(r.size + (withInfo(r) ? r.infoSize : 0));
    }
    if (used + groupBytes > maxBytes) break;
    used += groupBytes;
    entriesBytes += groupBytes;
    included = j;
    i = j;
  }
  if (entries.length > 0 && included === 0) return undefined;
  const done = included === entries.length;
  // A signed origin verifies only as a whole version: a part would be refused.
  if (!done && origin.stamp) return undefined;
  if (!done) header.to = entries[included - 1].entry.version;
  for (const r of entries.slice(0, included)) header.pods.push({ ...r.entry, info: withInfo(r) ? r.info : undefined });
  const body = deltaHeaderSize(header) + entriesBytes;
  return { delta: header, fieldSize: 1 + varintSize(body) + body, done };
}
