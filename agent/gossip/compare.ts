// Digest comparison: what a node tells a peer it holds, what it concludes from the peer's digest
// (what to send, what to ask for, what to adopt on the spot) and what it sends for a request.
// Pure: reads and advances an OriginTable, never touches the pods an origin holds.
import { DigestPacker, emptyDigest, pushEntry, shardMembers, wholeFits } from './packing.ts';
import type { OriginTable } from './origins.ts';
import type { OriginRecord } from './records.ts';
import { epochOf } from './signatures.ts';
import type { DigestWire } from './wire.ts';

/** The gossip timing a digest follows (GossipState's own settings). */
export interface DigestSettings {
  /** Pod data this recent is offered to every peer. */
  readonly hotMs: number;
  /** Bytes of a digest spent on a complete shard of the origins. */
  readonly shardBytes: number;
  /**
   * Origins are signed (signatures.ts): a version is adopted from a digest only within the epoch
   * held, since a new epoch needs its stamp, which only a delta carries.
   */
  readonly signed: boolean;
}

/** Whether an unsigned claim may move `o` to `version` (without a stamp). */
const adoptable = (o: OriginRecord, version: number, signed: boolean): boolean =>
  !signed || epochOf(version) === epochOf(o.version);

/** Someone needs `origin` from `since`. */
export interface Send {
  origin: OriginRecord;
  since: number;
}

export interface Comparison {
  sends: Send[];
  /** Origins the peer knows newer with data we lack: our versions, to ask for them. */
  want: DigestWire;
  /** Origins the peer is behind on by heartbeats only: versions it can adopt. */
  heartbeats: DigestWire;
  /** Origins we adopted newer versions of from the digest itself. */
  adopted: number;
  /** Origins whose pods changed recently that the peer did not mention: it may want them. */
  offers: DigestWire;
}

export const emptyComparison = (): Comparison => ({
  sends: [],
  want: emptyDigest(),
  heartbeats: emptyDigest(),
  adopted: 0,
  offers: emptyDigest(),
});
// A reply offers every recent pod change the asker did not mention (up to this many). Heartbeats
// are not pushed: they are the TTL's backstop, so anti-entropy's shards carry them soon enough.
const dataOffersPerReply = 32;
// A reply asks for at most this many origins about to age out (they are also in our digests).
const atRiskWantsPerReply = 32;

/**
 * What we know, in at most `maxBytes`. Two random agents differ on whichever origins' pods
 * changed in the last second or so, and on heartbeats (slow, a backstop), so a digest lists,
 * in order: our own origin; origins whose pods changed recently (fresh data is what routing
 * waits for: pushed); origins that missed heartbeats (a peer may have heard them: pulled before
 * they age out); and one complete shard of the id space, rotating with `cursor` (repairs
 * anything missed, spreads heartbeats, and tells the receiver what we lack). A small cluster's
 * whole state fits the shard budget: then every digest is complete.
 */
export function buildDigest(
  origins: OriginTable,
  settings: DigestSettings,
  maxBytes: number,
  cursor: number,
  now: number,
): DigestWire {
  const packer = new DigestPacker(maxBytes);
  packer.add(origins.self, maxBytes);
  const shardBudget = Math.min(settings.shardBytes, maxBytes / 4);
  const ids = origins.ids();
  if (wholeFits(ids.length, shardBudget)) {
    for (const id of ids) packer.add(origins.get(id)!, maxBytes);
    packer.digest.shards = 1;
    return packer.digest;
  }
  const room = maxBytes - shardBudget;
  origins.recentData.each(now, settings.hotMs, (o) => packer.add(o, room / 2));
  for (const o of origins.atRisk) if (!packer.add(o, (room * 3) / 4)) break;
  packer.addShard(ids, (id) => origins.get(id)!, cursor, Math.min(shardBudget, maxBytes - packer.used));
  return packer.digest;
}

/**
 * Compares a peer's digest (or offers, `offers` true: then what the peer lacks is not our
 * business, and we offer nothing back) with what we hold; adopts heartbeat-only advances on
 * the spot.
 */
export function compareDigest(
  origins: OriginTable,
  settings: DigestSettings,
  digest: DigestWire,
  now: number,
  offers = false,
): Comparison {
  const result = emptyComparison();
  const mentioned = new Set<number>();
  for (let i = 0; i < digest.origins.length; i++) {
    const id = digest.origins[i];
    const theirs = digest.versions[i];
    mentioned.add(id);
    const o = origins.get(id);
    if (o === undefined) {
      if (!origins.isIgnored(id, theirs, now)) pushEntry(result.want, id, 0);
    } else if (o.version > theirs) {
      if (!offers) offerTo(o, theirs, result, settings.signed);
    } else if (o.version < theirs && o !== origins.self) {
      const theirData = digest.dataLag.length ? theirs - digest.dataLag[i] : theirs;
      if (o.version >= theirData && adoptable(o, theirs, settings.signed)) {
        origins.advance(o, theirs, now, now, false);
        result.adopted++;
      } else {
        pushEntry(result.want, id, o.version);
      }
    }
  }
  if (offers) return result;
  // Pull what we are about to age out: whoever sent this digest may have heard it since.
  for (const o of origins.atRisk) {
    if (result.want.origins.length >= atRiskWantsPerReply) break;
    if (!mentioned.has(o.id) && !o.gone) pushEntry(result.want, o.id, o.version);
  }
  if (digest.shards > 0) {
    for (const o of shardMembers(origins.ids(), digest.shard, digest.shards).map((id) => origins.get(id)!)) {
      if (!mentioned.has(o.id) && o.version > 0) {
        mentioned.add(o.id);
        result.sends.push({ origin: o, since: 0 });
      }
    }
  }
  // Push-pull: the news we hold that the peer did not mention, fresh pod data first.
  const offer = (o: OriginRecord): boolean => {
    if (result.offers.origins.length >= dataOffersPerReply) return false;
    if (!mentioned.has(o.id)) {
      mentioned.add(o.id);
      pushEntry(result.offers, o.id, o.version, o.version - o.dataVersion);
    }
    return true;
  };
  origins.recentData.each(now, settings.hotMs, offer);
  return result;
}

/** What to send for a peer's request (a `want` digest). */
export function answerWant(origins: OriginTable, want: DigestWire, signed = false): Comparison {
  const result = emptyComparison();
  for (let i = 0; i < want.origins.length; i++) {
    const o = origins.get(want.origins[i]);
    if (o && o.version > want.versions[i]) offerTo(o, want.versions[i], result, signed);
  }
  return result;
}

/**
 * A peer at `theirs` needs o: a heartbeat entry when it lacks no data (and, signed, stays in its
 * epoch), else a delta (with no pods when only the epoch moved: it carries the stamp).
 */
function offerTo(o: OriginRecord, theirs: number, result: Comparison, signed: boolean): void {
  if (
    theirs > 0 &&
    theirs >= o.dataVersion &&
    theirs >= o.floor &&
    (!signed || epochOf(theirs) === epochOf(o.version))
  ) {
    pushEntry(result.heartbeats, o.id, o.version, o.version - o.dataVersion);
  } else {
    result.sends.push({ origin: o, since: theirs });
  }
}

/** Adopts versions a peer says are heartbeats past data we already hold. */
export function adoptHeartbeats(origins: OriginTable, heartbeats: DigestWire, now: number, signed = false): number {
  let adopted = 0;
  for (let i = 0; i < heartbeats.origins.length; i++) {
    const o = origins.get(heartbeats.origins[i]);
    const theirs = heartbeats.versions[i];
    const theirData = theirs - (heartbeats.dataLag[i] ?? 0);
    if (o && o !== origins.self && o.version < theirs && o.version >= theirData && adoptable(o, theirs, signed)) {
      origins.advance(o, theirs, now, now, false);
      adopted++;
    }
  }
  return adopted;
}
