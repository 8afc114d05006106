// Prometheus view of a GossipNode's counters, read when scraped (no bookkeeping on the hot path).
import { Counter, Gauge, type Registry } from '../../shared/prom-client.ts';
import { DROP_REASONS } from './envelope.ts';
import type { GossipStats } from './node.ts';

/** Registers kinference_gossip_* metrics that read `source.stats()` at scrape time. */
export function registerGossipMetrics(registry: Registry, source: { stats(): GossipStats }): void {
  /** A counter set at scrape time to the node's own totals, one per label set (`{}` when unlabelled). */
  const totals = <L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    read: (s: GossipStats) => [Partial<Record<L, string>>, number][],
  ) =>
    new Counter<L>({
      name,
      help,
      labelNames,
      registers: [registry],
      collect() {
        this.reset();
        for (const [labels, value] of read(source.stats())) this.inc(labels, value);
      },
    });

  totals(
    'kinference_gossip_bytes_total',
    'Gossip datagram bytes (envelope and HMAC included), by direction.',
    ['direction'],
    (s) => [
      [{ direction: 'sent' }, s.sent.bytes],
      [{ direction: 'received' }, s.received.bytes],
    ],
  );
  totals(
    'kinference_gossip_dropped_total',
    'Gossip datagrams dropped, by reason (forged, replayed, stale, misdirected, oversized, malformed; unknown-source and rate-limited before the HMAC).',
    ['reason'],
    (s) => DROP_REASONS.map((reason) => [{ reason }, s.dropped[reason]]),
  );
  totals(
    'kinference_gossip_delta_gaps_total',
    'Deltas that did not follow on from the version held (a datagram before them was lost).',
    [],
    (s) => [[{}, s.gaps]],
  );
  totals(
    'kinference_gossip_untrusted_total',
    'Origin state refused: not signed by a key trusted for its node (an impostor), or a signature that did not verify.',
    [],
    (s) => [[{}, s.untrusted]],
  );
  totals('kinference_gossip_origins_expired_total', 'Origins dropped after their TTL without advancing.', [], (s) => [
    [{}, s.expired],
  ]);
  new Gauge({
    name: 'kinference_gossip_origins',
    help: 'Other agents heard from within the TTL.',
    registers: [registry],
    collect() {
      this.set(source.stats().originsKnown);
    },
  });
  new Gauge({
    name: 'kinference_gossip_calibration_omitted',
    help: "1 while this agent's signed gossip state leaves its pods' calibration summaries out (with them it would not fit one datagram), else 0.",
    registers: [registry],
    collect() {
      this.set(source.stats().calibrationOmitted ? 1 : 0);
    },
  });
}

/** kinference_gossip_key_bindings_total{verdict}: Kubernetes key bindings decided (binding.ts). */
export function registerBindingMetrics(
  registry: Registry,
  binder: { counters: { trusted: number; refused: number } },
): void {
  new Counter({
    name: 'kinference_gossip_key_bindings_total',
    help: "Peers' gossip keys checked against their pods (challenge, TokenReview, pod), by verdict: trusted or refused.",
    labelNames: ['verdict'],
    registers: [registry],
    collect() {
      this.reset();
      this.inc({ verdict: 'trusted' }, binder.counters.trusted);
      this.inc({ verdict: 'refused' }, binder.counters.refused);
    },
  });
}
