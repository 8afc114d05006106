// The budget counters' wire format: shared/proto/budget.proto, loaded at run time, plus
// validation of everything a peer sends (a malformed message is an error, never a crash).
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import { varintSize } from '../../shared/varint.ts';
import { BUDGET_WINDOWS, WINDOW_MS, type BudgetWindow } from './limits.ts';
import type { Counter } from './ledger.ts';

const PROTO_PATH = fileURLToPath(new URL('../../shared/proto/budget.proto', import.meta.url));
const gossipType = protobuf.loadSync(PROTO_PATH).lookupType('kinference.budget.v1.BudgetGossip');

export class BudgetWireError extends Error {}

export interface BudgetDeltaWire {
  origin: string;
  from: number;
  to: number;
  counters: Counter[];
  /** The origin's signature of `to` as its head (agent/budget/signing.ts), when no counter is at `to`. */
  head?: Uint8Array;
}

export interface BudgetDigestWire {
  /** Origin id → version. */
  versions: Map<number, number>;
  /** shards > 0: every origin held in shard `shard` of `shards` (see budget.proto); 0: every origin. */
  shard: number;
  shards: number;
}

export interface BudgetGossipWire {
  digest?: BudgetDigestWire;
  deltas: BudgetDeltaWire[];
  /** An answer to a digest (see budget.proto): replied to with deltas only. */
  answer?: boolean;
  /** The asker has not synced yet: answer even when there is nothing to send. */
  syncing?: boolean;
  /** The answer cut nothing the asker lacked in shard `shard` of `shards`. */
  complete?: boolean;
  shard?: number;
  shards?: number;
}

/** The digest id of an origin name (first 4 bytes of its SHA-256; 0 is reserved for "absent"). */
export function budgetOriginId(origin: string): number {
  let id = originIds.get(origin);
  if (id === undefined) {
    id = createHash('sha256').update(origin).digest().readUInt32BE(0) || 1;
    if (originIds.size >= 16_384) originIds.delete(originIds.keys().next().value!);
    originIds.set(origin, id);
  }
  return id;
}
// Every digest hashes every origin held: remember the few thousand in use.
const originIds = new Map<string, number>();

const WINDOW_CODES: Record<BudgetWindow, number> = { minute: 1, hour: 2, day: 3 };

/** A counter's fields that travel as they are (names, window and change time are encoded). */
type AsIs = 'epoch' | 'tokens' | 'requests' | 'pendingTokens' | 'pendingRequests' | 'version';
const sentAsIs = (c: Pick<Counter, AsIs>): Pick<Counter, AsIs> => ({
  epoch: c.epoch,
  tokens: c.tokens,
  requests: c.requests,
  pendingTokens: c.pendingTokens,
  pendingRequests: c.pendingRequests,
  version: c.version,
});

export function encodeBudgetGossip(message: BudgetGossipWire): Uint8Array {
  const digest = message.digest && {
    origins: [...message.digest.versions.keys()],
    versions: [...message.digest.versions.values()],
    shard: message.digest.shard,
    shards: message.digest.shards,
  };
  // One table of tenant and provider names per message, referenced by index.
  const names: string[] = [];
  const index = new Map<string, number>();
  const ref = (name: string) => {
    let i = index.get(name);
    if (i === undefined) {
      i = names.push(name) - 1;
      index.set(name, i);
    }
    return i;
  };
  const deltas = message.deltas.map((delta) => ({
    // The name only where the receiver may not know the origin yet (it holds none of it).
    origin: delta.from === 0 ? delta.origin : '',
    originId: budgetOriginId(delta.origin),
    from: delta.from,
    to: delta.to,
    ...(delta.head ? { headSignature: delta.head } : {}),
    counters: delta.counters.map((c) => ({
      tenant: ref(c.tenant),
      provider: ref(c.provider),
      window: WINDOW_CODES[c.window],
      ...sentAsIs(c),
      changedMs: c.changedAt - c.epoch * WINDOW_MS[c.window],
      ...(c.signature ? { signature: c.signature } : {}),
    })),
  }));
  const { answer, complete, shard, shards, syncing } = message;
  return gossipType
    .encode({ ...(digest ? { digest } : {}), deltas, names, answer, complete, shard, shards, syncing })
    .finish();
}

// Upper bounds of encoded sizes, so an exchange fills a datagram without encoding twice: a
// scalar field is its tag byte and its varint; a name reference is taken at 2 bytes.
const scalarBytes = (n: number): number => (n === 0 ? 0 : 1 + varintSize(n));
const lengthPrefixed = (n: number): number => 1 + varintSize(n) + n;

/** Bytes one counter adds to a delta, at most (names referenced, not included). */
export function counterBytes(c: Counter): number {
  const body =
    4 +
    2 +
    scalarBytes(c.epoch) +
    scalarBytes(c.tokens) +
    scalarBytes(c.requests) +
    scalarBytes(c.pendingTokens) +
    scalarBytes(c.pendingRequests) +
    scalarBytes(c.version) +
    scalarBytes(Math.max(0, c.changedAt - c.epoch * WINDOW_MS[c.window])) +
    (c.signature ? 3 + c.signature.length : 0);
  return lengthPrefixed(body);
}

/** Bytes a name adds to a message's name table. */
export const nameBytes = (name: string): number => lengthPrefixed(Buffer.byteLength(name));

/** Bytes a delta's own fields and framing take, at most, without its counters (`head`: with a head signature). */
export function deltaHeaderBytes(origin: string, from: number, to: number, head = false): number {
  // 3: the delta's tag and a length prefix of up to two bytes (a delta fits a datagram); 5: the id.
  return 3 + 5 + (from === 0 ? nameBytes(origin) : 0) + scalarBytes(from) + scalarBytes(to) + (head ? 3 + 64 : 0);
}

/** Bytes a digest of `versions` takes as a field of BudgetGossip, at most. */
export function digestBytes(versions: Iterable<number>, entries: number): number {
  let sum = 0;
  for (const v of versions) sum += varintSize(v);
  // 3: the digest's tag and length prefix; 12: its shard fields.
  return 3 + (entries ? lengthPrefixed(4 * entries) + lengthPrefixed(sum) : 0) + 12;
}

const MAX_NAME = 253;
/** Shards of the origin id space a digest may name (the id's top 16 bits). */
export const MAX_SHARDS = 1 << 16;

/**
 * Decodes and checks one message; throws BudgetWireError on anything malformed. A delta names its
 * origin only from version 0; later ones carry its id, resolved by `originOf` (the origins the
 * receiver holds): a delta of an origin it does not hold is left out (`unknown`), and the next
 * exchange sends it from 0.
 */
export function decodeBudgetGossip(
  bytes: Uint8Array,
  originOf: (id: number) => string | undefined = () => undefined,
): BudgetGossipWire & { unknown: number } {
  let raw: Record<string, unknown>;
  try {
    raw = gossipType.toObject(gossipType.decode(bytes), { longs: Number, enums: Number, defaults: true, arrays: true });
  } catch (error) {
    throw new BudgetWireError(`undecodable budget message: ${(error as Error).message}`);
  }
  const out: BudgetGossipWire & { unknown: number } = {
    deltas: [],
    unknown: 0,
    answer: raw.answer as boolean,
    syncing: raw.syncing as boolean,
    complete: raw.complete as boolean,
    shard: raw.shard as number,
    shards: raw.shards as number,
  };
  const validShard = (shard: number, shards: number) =>
    shards === 0 || (shards <= MAX_SHARDS && (shards & (shards - 1)) === 0 && shard < shards);
  if (!validShard(out.shard!, out.shards!)) throw new BudgetWireError('bad shard');
  const digest = raw.digest as { origins: number[]; versions: number[]; shard: number; shards: number } | undefined;
  if (digest) {
    if (digest.origins.length !== digest.versions.length)
      throw new BudgetWireError('digest origins and versions differ in length');
    if (!validShard(digest.shard, digest.shards)) throw new BudgetWireError('bad digest shard');
    out.digest = {
      versions: new Map(digest.origins.map((id, i) => [id, digest.versions[i]])),
      shard: digest.shard,
      shards: digest.shards,
    };
  }
  const names = raw.names as string[];
  if (names.some((n) => n.length === 0 || n.length > MAX_NAME)) throw new BudgetWireError('an invalid name');
  for (const d of raw.deltas as {
    origin: string;
    originId: number;
    from: number;
    to: number;
    counters: Record<string, number>[];
    headSignature: Uint8Array;
  }[]) {
    if (d.origin.length > MAX_NAME) throw new BudgetWireError('an origin name too long');
    if (d.from === 0 && (!d.origin || budgetOriginId(d.origin) !== d.originId))
      throw new BudgetWireError('a delta from version 0 without its origin, or with an id not its own');
    const origin = d.from === 0 ? d.origin : originOf(d.originId);
    if (d.to < d.from) throw new BudgetWireError(`delta of ${origin} goes backwards (${d.from} → ${d.to})`);
    const counters = d.counters.map((c): Counter => {
      const window = BUDGET_WINDOWS[c.window - 1];
      const tenant = names[c.tenant];
      const provider = names[c.provider];
      if (window === undefined || tenant === undefined || provider === undefined)
        throw new BudgetWireError(`delta of ${origin} has a counter with an unknown window or name`);
      if (c.version <= d.from || c.version > d.to)
        throw new BudgetWireError(`delta of ${origin} has a counter outside its versions`);
      const signature = (c as unknown as { signature: Uint8Array }).signature;
      return {
        tenant,
        provider,
        window,
        ...sentAsIs(c as Pick<Counter, AsIs>),
        changedAt: c.epoch * WINDOW_MS[window] + c.changedMs,
        ...(signature.length ? { signature } : {}),
      };
    });
    const head = d.headSignature.length ? { head: d.headSignature } : {};
    if (origin === undefined) out.unknown++;
    else out.deltas.push({ origin, from: d.from, to: d.to, counters, ...head });
  }
  return out;
}

/**
 * The longest gap-free prefix of `counters` (changed after `from`, oldest first) that fits
 * `room` bytes as one delta; undefined when not even one counter fits. All of them: the delta
 * ends at `version` (the origin's own, which may be past its last counter's). `names`: the
 * message's name table so far; the names the delta's counters add go into it. `signed` (signed
 * mode): a delta may end past its last counter only with a head signature for `version`.
 */
export function cutDelta(
  origin: string,
  from: number,
  version: number,
  counters: readonly Counter[],
  room: number,
  names: Set<string>,
  signed?: { head?: Uint8Array },
): { delta: BudgetDeltaWire; bytes: number } | undefined {
  const head = signed?.head;
  let bytes = deltaHeaderBytes(origin, from, version, head !== undefined);
  let n = 0;
  for (const c of counters) {
    let add = counterBytes(c);
    for (const name of [c.tenant, c.provider]) if (!names.has(name)) add += nameBytes(name);
    if (bytes + add > room) break;
    bytes += add;
    names.add(c.tenant).add(c.provider);
    n++;
  }
  if (n === 0 && counters.length > 0) return undefined;
  if (bytes > room) return undefined;
  const taken = counters.slice(0, n);
  const last = n === 0 ? from : taken[n - 1].version;
  if (n < counters.length || (signed && last < version && !head))
    return { delta: { origin, from, to: last, counters: [...taken] }, bytes };
  return {
    delta: { origin, from, to: version, counters: [...taken], ...(last < version && head ? { head } : {}) },
    bytes,
  };
}
