// Across nodes by gossip alone: each agent follows only its own pods' KV events, gossips a
// 256-byte prefix summary per pod (through the real gossip wire encoding), and an agent on
// another node sends a long shared context to the pod that holds it. No process holds the whole
// cluster's index.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PodPool } from '../agent/pool/pool.ts';
import { decodeBatch } from '../agent/prefix/kv-events.ts';
import { PreciseIndex } from '../agent/prefix/precise-index.ts';
import { buildSummary, isSampled, summaryCachedTokens, summaryHas, SUMMARY_BYTES } from '../agent/prefix/summary.ts';
import { tokenBlockKeys } from '../agent/prefix/token-blocks.ts';
import { entryOf } from '../agent/gossip/records.ts';
import { decodePayload, encodePayload } from '../agent/gossip/wire.ts';
import { decide } from '../agent/route/router.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import type { PodEstimate, PodLoad } from '../agent/types.ts';
import { encodeKvBatch } from '../shared/sim/kv-publisher.ts';
import { mulberry32 } from '../shared/sim/random.ts';
import { poolOptions, routePod, routePolicy } from './helpers/route-fixtures.ts';

const NODES = ['n0', 'n1', 'n2'];
const POLICY = routePolicy({ name: 't', sloTtftMs: 60_000, exclude: [] });
const STAY = { allowed: false, reason: 'test', providers: [] };

test('a summary finds the deepest sampled block of a prompt, and nothing of another', () => {
  const rand = mulberry32(3);
  const tokens = Array.from({ length: 6000 }, () => Math.floor(rand() * 128_000));
  const keys = tokenBlockKeys(tokens, 16);
  const summary = buildSummary(keys.filter(isSampled));
  assert.equal(summary.length, SUMMARY_BYTES);
  const found = summaryCachedTokens(summary, keys, 16);
  // Up to 31 blocks short of the whole prompt (past its last sampled block).
  assert.ok(found > 6000 - 32 * 16 && found <= 6000, String(found));
  const other = tokenBlockKeys(
    Array.from({ length: 6000 }, () => Math.floor(rand() * 128_000)),
    16,
  );
  assert.equal(summaryCachedTokens(summary, other, 16), 0);
  // The measured false-positive rate of one probe with a full summary of 128 keys.
  const full = buildSummary(Array.from({ length: 128 }, (_, i) => (i + 1) * 32 * 1_000_003));
  let hits = 0;
  for (let i = 0; i < 100_000; i++) if (summaryHas(full, Math.floor(rand() * 2 ** 47) * 32)) hits++;
  assert.ok(hits / 100_000 < 0.01, `false positives ${hits / 1000}%`);
});

test('on 3 nodes, requests arriving at the other nodes reach the pod holding their context ≥ 80% of the time', () => {
  const now = { t: 10_000 };
  const rand = mulberry32(11);
  const nodes = NODES.map((node) => {
    const pool = new PodPool(poolOptions(() => now.t, { node, networkCostMs: 2 }));
    const pods = ['a', 'b'].map((x) => routePod(`${node}-${x}`, { node, engine: 'vllm' }));
    pool.setLocalPods(pods);
    const index = new PreciseIndex();
    pool.attachPreciseIndex(index, () => true);
    return { node, pool, pods, index };
  });
  const allPods = nodes.flatMap((n) => n.pods.map((pod) => ({ pod, n })));

  // 36 customers, each a 6,000-token context held by one pod (its engine's events say so).
  let hash = 1;
  const customers = Array.from({ length: 36 }, (_, c) => {
    const tokens = Array.from({ length: 6000 }, () => Math.floor(rand() * 128_000));
    const holder = allPods[c % allPods.length];
    const blocks = Math.floor(tokens.length / 16);
    let parent: number | undefined;
    for (let b = 0; b < blocks; b += 64) {
      const n = Math.min(64, blocks - b);
      const hashes = Array.from({ length: n }, () => hash++);
      const decoded = decodeBatch(
        encodeKvBatch(
          [{ type: 'stored', hashes, parent, tokens: tokens.slice(b * 16, (b + n) * 16), blockSize: 16 }],
          0,
        ),
      );
      assert.ok(decoded.ok);
      holder.n.index.apply(holder.pod.uid, decoded.value);
      parent = hashes.at(-1);
    }
    return { tokens, holder: holder.pod.uid, node: holder.n.node };
  });

  // Equal, idle loads everywhere; then one gossip exchange, every entry through the wire encoding.
  const load: PodLoad = { engine: 'vllm', at: now.t, waiting: 0, running: 1, kvCache: 0.5, kvCapacityTokens: 1 << 20 };
  for (const n of nodes) {
    for (const pod of n.pods) {
      const telemetry = new PodTelemetry();
      telemetry.record(load);
      n.pool.recordLoad(pod.uid, load, telemetry);
    }
  }
  const gossiped: PodEstimate[] = [];
  let summaryBytes = 0;
  for (const n of nodes) {
    const estimates = n.pool.localEstimates();
    const entries = estimates.map((e, slot) => entryOf(e, slot + 1, 1, 0));
    const bytes = encodePayload({
      deltas: [
        {
          origin: 1,
          from: 0,
          to: 1,
          ageMs: 0,
          node: n.node,
          incarnation: 1,
          floor: 0,
          continuesFull: false,
          pods: entries,
          agent: '',
        },
      ],
    });
    const back = decodePayload(bytes).deltas![0].pods;
    estimates.forEach((e, i) => {
      assert.ok(back[i].prefixSummary, `${e.pod.uid} gossips a summary`);
      summaryBytes = Math.max(summaryBytes, back[i].prefixSummary!.length);
      gossiped.push({ ...e, prefixSummary: back[i].prefixSummary });
    });
  }
  assert.equal(summaryBytes, SUMMARY_BYTES);
  for (const n of nodes) n.pool.setRemote(gossiped.filter((e) => e.origin !== n.node));

  let asked = 0;
  let reached = 0;
  for (const c of customers) {
    const query = Array.from({ length: 300 }, () => Math.floor(rand() * 128_000));
    const ids = [...c.tokens, ...query];
    for (const n of nodes) {
      if (n.node === c.node) continue;
      asked++;
      const candidates = n.pool.candidates('m', undefined, { ids });
      const d = decide({
        request: {
          kind: 'chat',
          model: 'm',
          tenant: 't',
          namespace: 'ns',
          tags: [],
          promptTokens: ids.length,
          stream: true,
        },
        policy: POLICY,
        candidates,
        leave: STAY,
        rand,
      });
      if (d.action === 'pod' && d.chosen.candidate.pod.uid === c.holder) reached++;
    }
  }
  assert.ok(reached / asked >= 0.8, `${reached} of ${asked} reached the holder`);
});
