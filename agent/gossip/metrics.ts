// Prometheus view of a GossipNode's counters, read when scraped (no bookkeeping on the hot path).
import { Counter, Gauge, type Registry } from 'prom-client';
import { DROP_REASONS } from './envelope.ts';
import type { GossipStats } from './node.ts';

/** Registers kinference_gossip_* metrics that read `source.stats()` at scrape time. */
export function registerGossipMetrics(registry: Registry, source: { stats(): GossipStats }): void {
  new Counter({
    name: 'kinference_gossip_bytes_total',
    help: 'Gossip datagram bytes (envelope and HMAC included), by direction.',
    labelNames: ['direction'] as const,
    registers: [registry],
    collect() {
      const s = source.stats();
      this.reset();
      this.inc({ direction: 'sent' }, s.sent.bytes);
      this.inc({ direction: 'received' }, s.received.bytes);
    },
  });
  new Counter({
    name: 'kinference_gossip_dropped_total',
    help: 'Gossip datagrams dropped, by reason (forged, replayed, stale, oversized, malformed; unknown-source and rate-limited before the HMAC).',
    labelNames: ['reason'] as const,
    registers: [registry],
    collect() {
      const s = source.stats();
      this.reset();
      for (const reason of DROP_REASONS) this.inc({ reason }, s.dropped[reason]);
    },
  });
  new Counter({
    name: 'kinference_gossip_delta_gaps_total',
    help: 'Deltas that did not follow on from the version held (a datagram before them was lost).',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(source.stats().gaps);
    },
  });
  new Counter({
    name: 'kinference_gossip_origins_expired_total',
    help: 'Origins dropped after their TTL without advancing.',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(source.stats().expired);
    },
  });
  new Gauge({
    name: 'kinference_gossip_origins',
    help: 'Other agents heard from within the TTL.',
    registers: [registry],
    collect() {
      this.set(source.stats().originsKnown);
    },
  });
}
