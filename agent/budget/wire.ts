// The budget counters' wire format: shared/proto/budget.proto, loaded at run time, plus
// validation of everything a peer sends (a malformed message is an error, never a crash).
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
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
}

export interface BudgetGossipWire {
  /** Origin id → version. */
  digest?: Map<number, number>;
  deltas: BudgetDeltaWire[];
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

export function encodeBudgetGossip(message: BudgetGossipWire): Uint8Array {
  const digest = message.digest && { origins: [...message.digest.keys()], versions: [...message.digest.values()] };
  const deltas = message.deltas.map((delta) => {
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
    const counters = delta.counters.map((c) => ({
      tenant: ref(c.tenant),
      provider: ref(c.provider),
      window: WINDOW_CODES[c.window],
      epoch: c.epoch,
      tokens: c.tokens,
      requests: c.requests,
      pendingTokens: c.pendingTokens,
      pendingRequests: c.pendingRequests,
      version: c.version,
      changedMs: c.changedAt - c.epoch * WINDOW_MS[c.window],
    }));
    return { origin: delta.origin, from: delta.from, to: delta.to, names, counters };
  });
  return gossipType.encode({ ...(digest ? { digest } : {}), deltas }).finish();
}

const MAX_NAME = 253;

/** Decodes and checks one message; throws BudgetWireError on anything malformed. */
export function decodeBudgetGossip(bytes: Uint8Array): BudgetGossipWire {
  let raw: Record<string, unknown>;
  try {
    raw = gossipType.toObject(gossipType.decode(bytes), { longs: Number, enums: Number, defaults: true, arrays: true });
  } catch (error) {
    throw new BudgetWireError(`undecodable budget message: ${(error as Error).message}`);
  }
  const out: BudgetGossipWire = { deltas: [] };
  const digest = raw.digest as { origins: number[]; versions: number[] } | undefined;
  if (digest) {
    if (digest.origins.length !== digest.versions.length)
      throw new BudgetWireError('digest origins and versions differ in length');
    out.digest = new Map(digest.origins.map((id, i) => [id, digest.versions[i]]));
  }
  for (const d of raw.deltas as {
    origin: string;
    from: number;
    to: number;
    names: string[];
    counters: Record<string, number>[];
  }[]) {
    if (!d.origin || d.origin.length > MAX_NAME) throw new BudgetWireError('delta without a valid origin');
    if (d.to < d.from) throw new BudgetWireError(`delta of ${d.origin} goes backwards (${d.from} → ${d.to})`);
    if (d.names.some((n) => n.length === 0 || n.length > MAX_NAME))
      throw new BudgetWireError(`delta of ${d.origin} has an invalid name`);
    const counters = d.counters.map((c): Counter => {
      const window = BUDGET_WINDOWS[c.window - 1];
      const tenant = d.names[c.tenant];
      const provider = d.names[c.provider];
      if (window === undefined || tenant === undefined || provider === undefined)
        throw new BudgetWireError(`delta of ${d.origin} has a counter with an unknown window or name`);
      if (c.version <= d.from || c.version > d.to)
        throw new BudgetWireError(`delta of ${d.origin} has a counter outside its versions`);
      return {
        tenant,
        provider,
        window,
        epoch: c.epoch,
        tokens: c.tokens,
        requests: c.requests,
        pendingTokens: c.pendingTokens,
        pendingRequests: c.pendingRequests,
        version: c.version,
        changedAt: c.epoch * WINDOW_MS[window] + c.changedMs,
      };
    });
    out.deltas.push({ origin: d.origin, from: d.from, to: d.to, counters });
  }
  return out;
}
