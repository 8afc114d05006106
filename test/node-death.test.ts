// A node dies (its agent SIGKILLed, its model servers gone) while the survivors route to its pods:
// no survivor answers 5xx (a failed attempt goes back through the decision and waits for a pod
// that is only busy), and within 2 s of the death no survivor has the dead node's pods among the
// pods it may choose (pod ejection, then the agents' failure detector and its news).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { Explanation } from '../agent/server/explain.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { freeUdpPort, runAgent, stopAgent, type AgentProcess } from './helpers/process.ts';
import { chatBody, MODEL, postJson, waitFor } from './helpers/stack.ts';

const KEY = 'test-gossip-key-0123456789abcdef';

interface Cluster {
  names: string[];
  agents: AgentProcess[];
  sims: SimServer[][];
  close(): Promise<void>;
}

/** `n` agents on loopback, each with `podsPerNode` small simulated pods, all gossiping with each other. */
async function startCluster(n: number, podsPerNode: number): Promise<Cluster> {
  const dir = mkdtempSync(join(tmpdir(), 'kinference-death-'));
  const names = Array.from({ length: n }, (_, i) => `node-${String.fromCharCode(97 + i)}`);
  const sims = await Promise.all(
    names.map((_, i) =>
      Promise.all(
        Array.from({ length: podsPerNode }, (_, j) =>
          startSim({ models: [MODEL], maxSeqs: 2, seed: 10 * i + j, speed: 0.5 }),
        ),
      ),
    ),
  );
  const ports = await Promise.all(names.map(() => freeUdpPort()));
  names.forEach((node, i) => {
    const config = {
      node,
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${ports[i]}` },
      scrapeInterval: '50ms',
      pods: sims[i].map((sim, j) => ({
        name: `${node}-pod-${j}`,
        namespace: 'inference',
        address: new URL(sim.url).host,
        engine: 'vllm',
        models: [MODEL],
      })),
      peers: ports.filter((_, k) => k !== i).map((p) => `127.0.0.1:${p}`),
      // The TTL is long on purpose: what takes the dead node out must be the failure detector.
      gossip: { key: { env: 'KINFERENCE_GOSSIP_KEY' }, interval: '100ms', ttl: '30s' },
      policies: [
        {
          metadata: { name: 'default', namespace: '*' },
          spec: { slo: { ttft: '5s' }, exclude: [{ metric: 'queued', above: 1, window: '1s' }], wait: { max: '5s' } },
        },
      ],
    };
    writeFileSync(join(dir, `${node}.yaml`), stringify(config));
  });
  const env = { ...process.env, KINFERENCE_GOSSIP_KEY: KEY };
  const agents = await Promise.all(names.map((node) => runAgent(join(dir, `${node}.yaml`), env)));
  return {
    names,
    agents,
    sims,
    async close() {
      await Promise.all(agents.map((a) => stopAgent(a)));
      for (const s of sims.flat()) await s.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const explain = async (agent: AgentProcess) =>
  (await (await fetch(`${agent.admin}/explain?model=${MODEL}`)).json()) as Explanation;

/** The pods an agent may choose now (those that passed every filter), by route name. */
const choosable = async (agent: AgentProcess) => (await explain(agent)).candidates.map((c) => c.pod);

async function nodeDeath(n: number): Promise<void> {
  const cluster = await startCluster(n, 2);
  try {
    const [dead, ...survivors] = [cluster.agents.at(-1)!, ...cluster.agents.slice(0, -1)];
    const deadNode = cluster.names.at(-1)!;
    for (const agent of survivors) {
      await waitFor(
        async () => (await explain(agent)).candidates.length + (await explain(agent)).dropped.length === 2 * n,
        15_000,
        'every pod known at every survivor',
      );
    }
    const statuses: { status: number; at: number; route: string }[] = [];
    let stop = false;
    let died = Infinity;
    // Outside traffic fills every survivor's pods (excluded: queued above 1), so their agents send
    // to the dead node's pods; it ends half a second after the death, so a request whose pod died
    // has a pod to wait for. Two clients per survivor stream short answers back to back.
    const held = cluster.sims
      .slice(0, -1)
      .flat()
      .flatMap((sim) => Array.from({ length: 6 }, () => sim.engine.submit({ promptTokens: 100, maxTokens: 100_000 })));
    const client = async (agent: AgentProcess) => {
      while (!stop) {
        const response = await postJson(
          `${agent.api}/v1/chat/completions`,
          chatBody('hi', { stream: true, max_tokens: 8 }),
        );
        await response.text();
        statuses.push({
          status: response.status,
          at: performance.now(),
          route: response.headers.get('x-kinference-route') ?? '',
        });
      }
    };
    const clients = survivors.flatMap((a) => Array.from({ length: 2 }, () => client(a)));
    await waitFor(
      () => statuses.some((s) => s.route.startsWith(`peer/${deadNode}/`)),
      8000,
      `a request served by ${deadNode} before it dies`,
    );
    await stopAgent(dead, 'SIGKILL');
    await Promise.all(cluster.sims.at(-1)!.map((s) => s.close()));
    died = performance.now();
    setTimeout(() => {
      for (const h of held) if (h.accepted) h.seq.abort();
    }, 500);
    // Whether any survivor may still choose a dead pod, checked until 3 s after the death.
    let lastChoosable = -1;
    while (performance.now() - died < 3000) {
      for (const agent of survivors) {
        if ((await choosable(agent)).some((p) => p.startsWith(`peer/${deadNode}/`)))
          lastChoosable = performance.now() - died;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    stop = true;
    await Promise.all(clients);
    const afterDeath = statuses.filter((s) => s.at >= died);
    const failed = statuses.filter((s) => s.status >= 500);
    assert.ok(afterDeath.length > 10, `requests kept flowing (${afterDeath.length})`);
    assert.deepEqual(failed, [], 'no 5xx from a survivor');
    assert.ok(
      lastChoosable <= 2000,
      `the dead node's pods were choosable ${Math.round(lastChoosable)} ms after the death`,
    );
  } finally {
    await cluster.close();
  }
}

describe('a node dies while the survivors route to its pods', () => {
  it('two agents: no 5xx, and the dead pods out of every decision within 2 s', () => nodeDeath(2));
  it('three agents: no 5xx, and the dead pods out of every decision within 2 s', () => nodeDeath(3));
});
