// One anti-entropy exchange of budget counters between two agents, on the ledger's plain data:
// the asker sends its digest, the answerer sends what is newer. Pure; the gossip shell carries
// the bytes (agent/budget/wire.ts encodes them).
import type { BudgetLedger } from './ledger.ts';
import { budgetOriginId, type BudgetDeltaWire } from './wire.ts';

/** Origin id → highest version held: "what I know". */
export function budgetDigest(ledger: BudgetLedger): Map<number, number> {
  return new Map([...ledger.versions()].map(([origin, version]) => [budgetOriginId(origin), version]));
}

/**
 * What the holder of `digest` lacks, at most `maxCounters` counters (a datagram's worth): per
 * origin, the counters changed after the version it holds, oldest first. A cut delta ends at
 * the last version it carries, so it stays gap-free and the next exchange continues from there.
 */
export function budgetDeltasFor(
  ledger: BudgetLedger,
  digest: ReadonlyMap<number, number>,
  maxCounters: number,
): BudgetDeltaWire[] {
  const deltas: BudgetDeltaWire[] = [];
  let room = maxCounters;
  for (const [origin, version] of ledger.versions()) {
    const held = digest.get(budgetOriginId(origin)) ?? 0;
    if (held >= version) continue;
    const changed = ledger.deltaSince(origin, held);
    if (changed.length > room) {
      if (room === 0) break;
      const counters = changed.slice(0, room);
      deltas.push({ origin, from: held, to: counters.at(-1)!.version, counters });
      break;
    }
    room -= changed.length;
    deltas.push({ origin, from: held, to: version, counters: changed });
  }
  return deltas;
}

/** Apply what a peer sent; returns how many deltas were refused (a gap: asked again next time). */
export function applyBudgetDeltas(ledger: BudgetLedger, deltas: readonly BudgetDeltaWire[]): number {
  let refused = 0;
  for (const d of deltas) if (!ledger.merge(d.origin, d.from, d.to, d.counters)) refused++;
  return refused;
}
