// `npm run soak`: one agent (a child process, as operators run it) in front of two simulated
// pods, under everything a hostile or unlucky cluster sends at once, in phases:
//   idle         probe latency with nothing else going on
//   fuzz         SOAK_FUZZ (10,000) fuzzed requests, 32 at a time
//   streams      SOAK_STREAMS (1,000) concurrent streams for SOAK_SECONDS (60) s
//   abuse        slowloris sockets, 4 clients posting 3 MB bodies, and a forged-gossip flood, for
//                SOAK_SECONDS / 2
//   after        SOAK_AFTER_SECONDS (30) s without load, then the last RSS reading
// It prints the agent's memory over time (RSS, and where it is: bench/process-memory.ts), whether
// RSS came back within 20% of its start, errors by kind, how the streams spread over the pods, and
// the p99 of a small probe request in each phase. The agent runs as the image runs it (compiled
// dist/, the image's node flags and malloc settings); SOAK_ENTRY=source runs the TypeScript sources,
// SOAK_NODE_FLAGS replaces the flags, and a malloc variable set for the soak (e.g.
// MALLOC_ARENA_MAX=2 npm run soak) replaces the image's. Not part of `npm test` (minutes, and it
// loads both cores). Exits 1 on a crash, an error, or RSS not back within 20%.
import { writeFileSync, mkdtempSync } from 'node:fs';
import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { stringify } from 'yaml';
import { startSim } from '../shared/sim/server.ts';
import { mulberry32 } from '../shared/sim/random.ts';
import { requestText } from '../test/fixtures/fuzz-requests.ts';
import { freeUdpPort, runAgent, stopAgent } from '../test/helpers/process.ts';
import { imageLaunch, MemorySampler } from '../bench/process-memory.ts';

const MODEL = 'llama-3-8b';
const FUZZ = Number(process.env.SOAK_FUZZ ?? 10_000);
const STREAMS = Number(process.env.SOAK_STREAMS ?? 1_000);
const SECONDS = Number(process.env.SOAK_SECONDS ?? 60);
const SLOWLORIS = Number(process.env.SOAK_SLOWLORIS ?? 300);
/** Seconds without load before the last RSS reading. */
const AFTER = Number(process.env.SOAK_AFTER_SECONDS ?? 30);

const sims = await Promise.all(
  [0, 1].map((i) => startSim({ models: [MODEL], seed: 100 + i, name: `pod-${i}`, maxSeqs: 1024 })),
);
const gossipPort = await freeUdpPort();
const dir = mkdtempSync(join(tmpdir(), 'kinference-soak-'));
const config = join(dir, 'agent.yaml');
process.env.KINFERENCE_SOAK_GOSSIP_KEY = 'soak-gossip-key-0123456789abcdef';
writeFileSync(
  config,
  stringify({
    node: 'soak',
    listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${gossipPort}` },
    gossip: { key: { env: 'KINFERENCE_SOAK_GOSSIP_KEY' } },
    peers: ['127.0.0.2:7946'],
    pods: sims.map((s, i) => ({
      name: `pod-${i}`,
      address: new URL(s.url).host,
      engine: 'vllm',
      models: [MODEL],
      maxConcurrency: 1024,
    })),
    policies: [
      { metadata: { name: 'default', namespace: '*' }, spec: { slo: { ttft: '120s' }, wait: { max: '30s' } } },
    ],
    limits: { maxConnectionsPerPod: 1024, maxWaiting: 5000 },
    logLevel: 'error',
  }),
);
// With the flag the container image runs it with (Dockerfile).
// As the container image runs it (compiled, the image's node flags) unless SOAK_ENTRY=source;
// SOAK_NODE_FLAGS replaces the flags (to measure others).
const launch = imageLaunch(
  process.env.SOAK_ENTRY === 'source' ? 'source' : 'image',
  process.env.SOAK_NODE_FLAGS?.split(' ').filter(Boolean),
);
const agent = await runAgent(config, { ...launch.env, ...process.env }, launch);
const pid = agent.child.pid!;
console.log(`agent pid ${pid}`);
const client = new Agent({ connections: 4096, keepAliveTimeout: 10_000 });
const started = Date.now();
const memory = new MemorySampler(pid, agent.admin);
const errors: Record<string, number> = {};
const count = (kind: string) => (errors[kind] = (errors[kind] ?? 0) + 1);

async function post(body: string, stream = false): Promise<{ status: number; route: string; text: string }> {
  const res = await request(`${agent.api}/v1/chat/completions`, {
    method: 'POST',
    dispatcher: client,
    headers: { 'content-type': 'application/json' },
    body,
  });
  const text = await res.body.text();
  if (stream && res.statusCode === 200 && !text.endsWith('data: [DONE]\n\n')) count('stream without [DONE]');
  return { status: res.statusCode, route: String(res.headers['x-kinference-route'] ?? ''), text };
}

/** p99 of a one-token chat request, sent every 50 ms while `during` runs. */
async function probe(during: Promise<unknown>): Promise<number> {
  const times: number[] = [];
  let done = false;
  void during.finally(() => (done = true));
  while (!done) {
    const t = performance.now();
    const r = await post(
      JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'ping' }], max_tokens: 1 }),
    );
    if (r.status !== 200) count(`probe ${r.status}`);
    times.push(performance.now() - t);
    await new Promise((r) => setTimeout(r, 50));
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length * 0.99)] ?? NaN;
}

await new Promise((r) => setTimeout(r, 2000)); // first scrapes, JIT of the startup paths
memory.phase = 'idle';
const rssStart = (await memory.sample()).rssMb;
const idleP99 = await probe(new Promise((r) => setTimeout(r, 5000)));

// --- fuzz ---------------------------------------------------------------------------------------
memory.phase = 'fuzz';
const rand = mulberry32(12);
let fuzzed = 0;
const byStatus: Record<number, number> = {};
const fuzzP99 = await probe(
  (async () => {
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (fuzzed < FUZZ) {
          fuzzed++;
          const r = await post(requestText(rand, MODEL)).catch(() => ({ status: 0, route: '', text: '' }));
          byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
          if (r.status >= 500 || r.status === 0) count(`fuzz ${r.status}`);
        }
      }),
    );
  })(),
);

console.log(`fuzz: ${FUZZ} requests in ${Math.round((Date.now() - started) / 1000)} s since start`);

// --- streams: STREAMS concurrent for SECONDS ------------------------------------------------------
memory.phase = 'streams';
const routes: Record<string, number> = {};
const streamsUntil = Date.now() + SECONDS * 1000;
const streamsP99 = await probe(
  Promise.all(
    Array.from({ length: STREAMS }, async (_, i) => {
      await new Promise((r) => setTimeout(r, (i * 10) % 2000)); // ramp up over 2 s
      while (Date.now() < streamsUntil) {
        const r = await post(
          JSON.stringify({
            model: MODEL,
            messages: [{ role: 'user', content: `stream ${i}` }],
            max_tokens: 100,
            stream: true,
          }),
          true,
        ).catch(() => ({ status: 0, route: '', text: '' }));
        routes[r.route] = (routes[r.route] ?? 0) + 1;
        if (r.status !== 200) count(`stream ${r.status}`);
      }
    }),
  ),
);
console.log(`streams done at ${Math.round((Date.now() - started) / 1000)} s`);

// --- abuse: slowloris + large bodies + gossip flood for SECONDS / 2 -----------------------------
memory.phase = 'abuse';
const abuseUntil = Date.now() + (SECONDS / 2) * 1000;
const abuse = (async () => {
  const slowloris = Array.from({ length: SLOWLORIS }, () => {
    const url = new URL(agent.api);
    const socket = connect(Number(url.port), url.hostname);
    socket.on('error', () => {});
    socket.write(
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n',
    );
    const drip = setInterval(() => socket.write('x'), 1000);
    return () => {
      clearInterval(drip);
      socket.destroy();
    };
  });
  const big = JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: 'lorem ipsum '.repeat(250_000) }],
    max_tokens: 1,
  });
  const large = Promise.all(
    Array.from({ length: 4 }, async () => {
      while (Date.now() < abuseUntil) {
        const r = await post(big).catch(() => ({ status: 0, route: '', text: '' }));
        if (r.status >= 500 || r.status === 0) count(`large body ${r.status}`);
      }
    }),
  );
  const udp = createSocket('udp4');
  const junk = Buffer.alloc(1200, 0x42);
  const flood = setInterval(() => {
    for (let i = 0; i < 200; i++) udp.send(junk, gossipPort, '127.0.0.1');
  }, 10);
  await large;
  clearInterval(flood);
  udp.close();
  for (const stop of slowloris) stop();
})();
const abuseP99 = await probe(abuse);

memory.phase = 'after';
await new Promise((r) => setTimeout(r, AFTER * 1000)); // let sockets, buffers and V8's pages go
const rssEnd = (await memory.sample()).rssMb;
memory.stop();
const metrics = await (await fetch(`${agent.admin}/metrics`)).text();
const crashed = agent.child.exitCode !== null;
await stopAgent(agent);
await client.close();
await Promise.all(sims.map((s) => s.close()));

const gossipDrops = metrics
  .split('\n')
  .filter((l) => l.startsWith('kinference_gossip_dropped_total') && !l.endsWith(' 0'))
  .join(', ');
console.log(
  `node ${process.version} ${launch.nodeFlags.join(' ')} ${launch.main ? 'dist/ (as the image)' : 'TypeScript sources'}; fuzz ${FUZZ}, streams ${STREAMS} x ${SECONDS}s, slowloris ${SLOWLORIS}, 4 x 3 MB bodies, gossip flood 20k datagrams/s`,
);
console.log(`memory over time (agent process):\n${memory.table()}`);
const within = rssEnd <= rssStart * 1.2;
console.log(
  `RSS: start ${rssStart} MB, end ${rssEnd} MB (${Math.round((rssEnd / rssStart - 1) * 100)}%): ${within ? 'back within 20% of its start' : 'NOT back within 20% of its start'}`,
);
console.log(
  `probe p99: idle ${idleP99.toFixed(1)} ms, fuzz ${fuzzP99.toFixed(1)} ms, ${STREAMS} streams ${streamsP99.toFixed(1)} ms (the pods' batch, not the agent), slowloris + large bodies + gossip flood ${abuseP99.toFixed(1)} ms (${(abuseP99 / idleP99).toFixed(2)}x idle)`,
);
console.log(`fuzz answers by status: ${JSON.stringify(byStatus)}`);
console.log(`streams by route: ${JSON.stringify(routes)}`);
console.log(`gossip: ${gossipDrops}`);
console.log(`crashed: ${crashed}; errors (5xx, lost streams): ${JSON.stringify(errors)}`);
process.exit(crashed || Object.keys(errors).length > 0 || !within ? 1 : 0);
