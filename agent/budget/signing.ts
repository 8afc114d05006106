// Budget counters signed by their origin: each counter carries its origin agent's Ed25519
// signature (the gossip identity, agent/gossip/signatures.ts) over exactly what travels, so a
// relay can pass it on but not change it, and a holder of the cluster key cannot write another
// origin's counters. A delta's end version (`to`) is believed only when a signed counter sits at
// it, or the origin signed that version as its head (versions move past the last counter when
// counters are pruned): otherwise a forged jump of the version would hide the genuine counters.
import { verify, type KeyObject } from 'node:crypto';
import { WINDOW_MS } from './limits.ts';
import type { Counter } from './counter-store.ts';

export const SIGNATURE_BYTES = 64;

/** The gossip identity's two halves, as the budget exchange uses them (agent/gossip/node.ts passes them). */
export interface CounterKeys {
  /** The public key of one gossip origin instance, while gossip holds it (or held it lately). */
  of(node: string, incarnation: number): KeyObject | undefined;
  /** Signs with this agent's own key. */
  sign(message: Buffer): Buffer;
}

/** A counter's change time as the wire carries it: ms from its window's start, a uint32. */
export const changedMsOf = (c: Counter): number => (c.changedAt - c.epoch * WINDOW_MS[c.window]) >>> 0;

/** The bytes a counter's signature covers: its origin and every field the wire carries. */
export function counterMessage(origin: string, c: Counter): Buffer {
  const numbers = Buffer.alloc(8 * 7);
  [c.epoch, c.tokens, c.requests, c.pendingTokens, c.pendingRequests, c.version, changedMsOf(c)].forEach((n, i) =>
    numbers.writeDoubleBE(n, 8 * i),
  );
  const names = `${origin}\0${c.tenant}\0${c.provider}\0${c.window}\0`;
  return Buffer.concat([Buffer.from('kinference-budget-counter-v1\0'), Buffer.from(names), numbers]);
}

/** The bytes a head signature covers: the origin and a version it reached. */
export function headMessage(origin: string, version: number): Buffer {
  const v = Buffer.alloc(4);
  v.writeUInt32BE(version >>> 0);
  return Buffer.concat([Buffer.from(`kinference-budget-head-v1\0${origin}\0`), v]);
}

export function verifies(key: KeyObject, message: Buffer, signature: Uint8Array | undefined): boolean {
  if (signature?.length !== SIGNATURE_BYTES) return false;
  try {
    return verify(null, message, key, signature);
  } catch {
    return false;
  }
}

/** `node#incarnation` (a budget origin's name) → the gossip origin instance it names. */
export function instanceOf(origin: string): { node: string; incarnation: number } | undefined {
  const cut = origin.lastIndexOf('#');
  const incarnation = Number(origin.slice(cut + 1));
  return cut > 0 && Number.isSafeInteger(incarnation) ? { node: origin.slice(0, cut), incarnation } : undefined;
}
