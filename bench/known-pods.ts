// A pod pool as a large cluster fills it, for the benches that measure what grows with it.
import { PodPool } from '../agent/pool/pool.ts';
import type { Candidate } from '../agent/route/candidate.ts';
import { poolOptions } from '../test/helpers/route-fixtures.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import type { decide } from '../agent/route/router.ts';
import { resolve } from 'node:path';
import type { PodEstimate, PodLoad } from '../agent/types.ts';

/** The pool and telemetry classes to build with: this tree's, or another tree's for a side-by-side run. */
export interface PoolClasses {
  PodPool: typeof PodPool;
  PodTelemetry: typeof PodTelemetry;
}

/** Another checkout's pool and telemetry classes and its decide(), for a side-by-side run. */
export async function treeAt(dir: string): Promise<{ classes: PoolClasses; decide: typeof decide }> {
  const pool = (await import(resolve(dir, 'agent/pool/pool.ts'))) as { PodPool: typeof PodPool };
  const telemetry = (await import(resolve(dir, 'agent/telemetry/pod-telemetry.ts'))) as {
    PodTelemetry: typeof PodTelemetry;
  };
  const router = (await import(resolve(dir, 'agent/route/router.ts'))) as { decide: typeof decide };
  return { classes: { PodPool: pool.PodPool, PodTelemetry: telemetry.PodTelemetry }, decide: router.decide };
}

/** A pool that knows `known` pods: `local` on this node (scraped), the rest gossiped by peers,
 *  `podsPerNode` to a node; a quarter of the peers' pods serve another model. With `historyMs`,
 *  each local pod has that long of scrapes every 100 ms in its windows (as a running agent has),
 *  the last one the same as without. With `observations`, this agent has measured that many TTFTs
 *  at each local pod (0.7–1.3× their predictions), so the model and its calibration have data,
 *  as an agent that has served requests has. */
export function poolKnowing(
  known: number,
  local: readonly Candidate[],
  podsPerNode = 8,
  historyMs = 0,
  classes: PoolClasses = { PodPool, PodTelemetry },
  observations = 0,
): PodPool {
  // An epoch time, as the agent's clock (performance.timeOrigin + performance.now()) gives.
  const now = 1_764_000_000_000;
  const pool = new classes.PodPool(poolOptions(() => now, { node: 'here' }));
  pool.setLocalPods(local.map((c) => ({ ...c.pod, node: 'here' })));
  local.forEach((c, i) => {
    const telemetry = new classes.PodTelemetry();
    for (let k = 0, at = now - 40 - historyMs; at < now - 40; k++, at += 100) {
      telemetry.record({ at, engine: 'vllm', waiting: (i + k) % 3, running: (i * 7) % 16, kvCache: 0.4 });
    }
    const load: PodLoad = { at: now - 40, engine: 'vllm', waiting: i % 4, running: (i * 7) % 16, kvCache: 0.4 };
    telemetry.record(load);
    pool.recordLoad(c.pod.uid, load, telemetry);
  });
  const peers: PodEstimate[] = [];
  for (let i = local.length; i < known; i++) {
    peers.push({
      pod: {
        uid: `peer/pod-${i}`,
        name: `pod-${i}`,
        namespace: 'ns',
        node: `node-${Math.floor(i / podsPerNode)}`,
        address: `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}:8000`,
        models: [i % 4 === 0 ? 'mistral-7b' : 'llama-3-8b'],
      },
      queued: i % 4,
      queuedNow: i % 4,
      running: (i * 7) % 16,
      kvCache: 0.4,
      params: { base: 20 + (i % 3), perQueued: 180, perRunning: 3, perKPromptTokens: 260 },
      at: now - 500,
      origin: `node-${Math.floor(i / podsPerNode)}`,
      version: 1,
    });
  }
  pool.setRemote(peers);
  for (let k = 0; k < observations; k++) {
    for (const c of pool.candidates()) {
      if (c.where !== 'local') continue;
      const ticket = pool.begin(c, 400, 'chat', true);
      ticket.firstByte(ticket.predictedMs * (0.7 + ((k * 37) % 60) / 100));
      ticket.end(true);
    }
  }
  return pool;
}
