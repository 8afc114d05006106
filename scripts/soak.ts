// `npm run soak`: one agent (a child process, as operators run it) in front of two simulated
// pods, under everything a hostile or unlucky cluster sends at once, in phases:
//   idle         probe latency with nothing else going on (also the agent's warm-up), then
//                WARM_QUIET s without requests, so the agent is in the same quiet state the
//                end is read in (its idle memory release has run): the RSS start
//   fuzz         SOAK_FUZZ (10,000) fuzzed requests, 32 at a time
//   streams      SOAK_STREAMS (1,000) concurrent streams for SOAK_SECONDS (60) s
//   abuse        slowloris sockets, 4 clients posting 3 MB bodies, and a forged-gossip flood, for
//                SOAK_SECONDS / 2
//   after        SOAK_AFTER_SECONDS (30) s without load, then the last RSS reading
// Four processes besides the agent, so that nothing measured shares an event loop with the load:
// this one (the probe, a one-token request every 50 ms, and the samplers), scripts/soak/sims.ts
// twice (the two pods the load goes to; the probe's own pod, serving a model of its own so the
// probe measures the agent rather than pods busy with the load) and one scripts/soak/load.ts per
// phase (the load). It prints the agent's memory
// over time (RSS, and where it is: bench/process-memory.ts), whether RSS came back within 20 % of
// its start, errors by kind, the probe's p99 and the agent's own event-loop delay per phase (from
// its /metrics, read every second), how the streams spread over the pods and the most each pod
// held at once. The agent runs as the image runs it (compiled dist/, the image's node flags and
// malloc settings); SOAK_ENTRY=source runs the TypeScript sources, SOAK_NODE_FLAGS replaces the
// flags, and a malloc variable set for the soak (e.g. MALLOC_ARENA_MAX=2 npm run soak) replaces
// the image's. Not part of `npm test` (minutes, and it loads both cores). Exits 1 unless every
// line of issue 12's acceptance holds: no crash, no error, RSS back within 20 %, probe p99 under
// abuse within 2x idle, no pod given more requests at once than its connection cap.
import { fork, spawnSync, type ChildProcess } from 'node:child_process';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir, loadavg } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import { stringify } from 'yaml';
import { freeUdpPort, runAgent, stopAgent } from '../test/helpers/process.ts';
import { newIdentity } from '../agent/gossip/signatures.ts';
import { arenasOf, imageLaunch, MemorySampler, socketsOf, type MemorySample } from '../bench/process-memory.ts';
import type { LoadResult, LoadSpec } from './soak/load.ts';

const MODEL = 'llama-3-8b';
const FUZZ = Number(process.env.SOAK_FUZZ ?? 10_000);
const STREAMS = Number(process.env.SOAK_STREAMS ?? 1_000);
const SECONDS = Number(process.env.SOAK_SECONDS ?? 60);
const SLOWLORIS = Number(process.env.SOAK_SLOWLORIS ?? 300);
/** Which abuse the abuse phase sends (to attribute; the acceptance run sends all three). */
const ABUSE = (process.env.SOAK_ABUSE ?? 'slowloris,large,gossip').split(',') as LoadSpec['abuse'];
/** Sets the agent's limits.bodyWorkers (0: large bodies judged on the event loop, to compare). */
const BODY_WORKERS = process.env.SOAK_BODY_WORKERS;
/** After the last reading, attach gdb and call glibc's malloc_trim(0) in the agent, then read again:
 *  how much of what stayed was free memory glibc kept (a diagnostic; the verdict is read before). */
const TRIM_PROBE = process.env.SOAK_TRIM_PROBE === '1';
/** With the trim probe: glibc's accounting of its arenas (malloc_info through gdb: live vs free) and the
 *  agent's TCP sockets by peer, at the start reading and the end reading. */
const ARENAS = TRIM_PROBE;
/** Which load phases run (to attribute; the acceptance run runs all three). */
const PHASES = (process.env.SOAK_PHASES ?? 'fuzz,streams,abuse').split(',');
/** Seconds without load before the last RSS reading. */
const AFTER = Number(process.env.SOAK_AFTER_SECONDS ?? 30);
/** Seconds without requests after the idle phase before the start reading (> the 10 s idle release). */
const WARM_QUIET = 16;
/** Requests one pod may hold at once: its engine's max-num-seqs and the agent's connection cap. */
const POD_CAP = 1024;

const here = new URL('.', import.meta.url).pathname;
/** The probe's model, served by a pod of its own in a process of its own: the probe measures the
 *  agent, not the pods the load keeps busy (1,000 streams, 3 MB bodies parsed on their loop). */
const PROBE_MODEL = 'soak-probe';
const sims = fork(join(here, 'soak/sims.ts'), [MODEL, String(POD_CAP), '2', 'pod-'], { stdio: 'inherit' });
const probePod = fork(join(here, 'soak/sims.ts'), [PROBE_MODEL, '64', '1', 'probe-'], { stdio: 'inherit' });
const message = <T>(child: ChildProcess, key: string) =>
  new Promise<T>((resolve) => {
    const on = (m: Record<string, unknown>) => {
      if (!(key in m)) return;
      child.off('message', on);
      resolve(m as T);
    };
    child.on('message', on);
  });
const { urls } = await message<{ urls: string[] }>(sims, 'urls');
const probeUrl = (await message<{ urls: string[] }>(probePod, 'urls')).urls[0];
const gossipPort = await freeUdpPort();
const dir = mkdtempSync(join(tmpdir(), 'kinference-soak-'));
const config = join(dir, 'agent.yaml');
process.env.KINFERENCE_SOAK_GOSSIP_KEY = 'soak-gossip-key-0123456789abcdef';
writeFileSync(
  config,
  stringify({
    node: 'soak',
    listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${gossipPort}` },
    // The peer never answers: its key only has to be listed (static mode requires one per peer).
    gossip: {
      key: { env: 'KINFERENCE_SOAK_GOSSIP_KEY' },
      peerKeys: [{ node: 'absent', key: newIdentity().publicKey }],
    },
    peers: ['127.0.0.2:7946'],
    pods: [
      ...urls.map((url, i) => ({
        name: `pod-${i}`,
        address: new URL(url).host,
        engine: 'vllm',
        models: [MODEL],
        maxConcurrency: POD_CAP,
      })),
      { name: 'probe-0', address: new URL(probeUrl).host, engine: 'vllm', models: [PROBE_MODEL] },
    ],
    policies: [
      { metadata: { name: 'default', namespace: '*' }, spec: { slo: { ttft: '120s' }, wait: { max: '30s' } } },
    ],
    limits: {
      maxConnectionsPerPod: POD_CAP,
      maxWaiting: 5000,
      ...(BODY_WORKERS === undefined ? {} : { bodyWorkers: Number(BODY_WORKERS) }),
    },
    logLevel: 'error',
  }),
);
// As the container image runs it (compiled, the image's node flags) unless SOAK_ENTRY=source;
// SOAK_NODE_FLAGS replaces the flags (to measure others).
const launch = imageLaunch(
  process.env.SOAK_ENTRY === 'source' ? 'source' : 'image',
  process.env.SOAK_NODE_FLAGS?.split(' ').filter(Boolean),
);
// SOAK_AGENT_ENV (JSON) adds variables for the agent alone, e.g. a profiler's LD_PRELOAD.
const agentEnv = JSON.parse(process.env.SOAK_AGENT_ENV ?? '{}') as Record<string, string>;
const agent = await runAgent(config, { ...launch.env, ...process.env, ...agentEnv }, launch);
const pid = agent.child.pid!;
console.log(
  `agent pid ${pid}; load average at start ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
const client = new Agent({ connections: 16, keepAliveTimeout: 10_000 });
const memory = new MemorySampler(pid, agent.admin);
const errors: Record<string, number> = {};
const count = (kind: string, n = 1) => (errors[kind] = (errors[kind] ?? 0) + n);

/** Samples of the agent's event-loop delay (prom-client's monitorEventLoopDelay gauges, reset at
 *  every read of /metrics): the p99 and max of each ~1 s window, by phase; also this process's own. */
const loopDelay: Record<string, { p99: number[]; max: number[] }> = {};
const ownDelay = monitorEventLoopDelay({ resolution: 10 });
ownDelay.enable();
const ownDelayMax: Record<string, number> = {};
let phase = 'start';
const gauge = (page: string, name: string) =>
  Number(new RegExp(`^kinference_${name}(?:\\{[^}]*\\})? (\\S+)`, 'm').exec(page)?.[1] ?? NaN) * 1000;
const delaySampler = setInterval(() => {
  ownDelayMax[phase] = Math.max(ownDelayMax[phase] ?? 0, ownDelay.max / 1e6);
  ownDelay.reset();
  void fetch(`${agent.admin}/metrics`)
    .then((r) => r.text())
    .then((page) => {
      const d = (loopDelay[phase] ??= { p99: [], max: [] });
      d.p99.push(gauge(page, 'nodejs_eventloop_lag_p99_seconds'));
      d.max.push(gauge(page, 'nodejs_eventloop_lag_max_seconds'));
    })
    .catch(() => {});
}, 1000);
const setPhase = (name: string) => {
  phase = name;
  memory.phase = name;
};
const metric = async (name: string) => gauge(await (await fetch(`${agent.admin}/metrics`)).text(), name) / 1000;

/** p99 of a one-token chat request, sent every 50 ms until `during` settles. */
async function probe(during: Promise<unknown>): Promise<number> {
  const times: number[] = [];
  let done = false;
  void during.finally(() => (done = true));
  const body = JSON.stringify({ model: PROBE_MODEL, messages: [{ role: 'user', content: 'ping' }], max_tokens: 1 });
  while (!done) {
    const t = performance.now();
    const res = await request(`${agent.api}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: client,
      headers: { 'content-type': 'application/json' },
      body,
    }).catch(() => undefined);
    await res?.body.text();
    if (res?.statusCode !== 200) count(`probe ${res?.statusCode ?? 'connection error'}`);
    times.push(performance.now() - t);
    await new Promise((r) => setTimeout(r, 50));
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length * 0.99)] ?? NaN;
}

/** Runs one phase's load in its own process. */
function load(which: LoadSpec['phase'], seconds = SECONDS): Promise<LoadResult> {
  const spec: LoadSpec = {
    phase: which,
    api: agent.api,
    model: MODEL,
    fuzz: FUZZ,
    streams: STREAMS,
    seconds,
    slowloris: SLOWLORIS,
    gossipPort,
    abuse: ABUSE,
  };
  const child = fork(join(here, 'soak/load.ts'), [JSON.stringify(spec)], { stdio: 'inherit' });
  const exited = new Promise<never>((_, reject) =>
    child.on('exit', (code) => reject(new Error(`soak load ${which} exited ${code} without a result`))),
  );
  return Promise.race([message<LoadResult>(child, 'errors'), exited]);
}

await new Promise((r) => setTimeout(r, 2000)); // first scrapes
setPhase('idle');
const rssLaunch = (await memory.sample()).rssMb;
const idleP99 = await probe(new Promise((r) => setTimeout(r, 5000)));
setPhase('warm');
await new Promise((r) => setTimeout(r, WARM_QUIET * 1000));
const releasesAtStart = await metric('memory_releases_total');
const rssStart = (await memory.sample()).rssMb;
const ports: Record<string, number> = {
  ...Object.fromEntries(urls.map((url, i) => [`pod-${i}`, Number(new URL(url).port)])),
  'probe pod': Number(new URL(probeUrl).port),
  api: Number(new URL(agent.api).port),
  admin: Number(new URL(agent.admin).port),
};
/** Where glibc's heaps and the agent's sockets are (with the trim probe), printed at the end. */
const inside: string[] = [];
const lookInside = (when: string) => {
  if (!ARENAS) return;
  const a = arenasOf(pid);
  const arenas = a
    ? `${a.arenas.map((x) => `arena ${x.arena} ${x.systemMb} MB (${x.inUseMb} in use, ${x.freeMb} free)`).join(', ')}, mmapped ${a.mmapMb} MB`
    : 'gdb could not attach';
  inside.push(`${when}: glibc ${arenas}; sockets ${JSON.stringify(socketsOf(pid, ports))}`);
};
lookInside('start');
const loads: Record<string, number[]> = {};
const noteLoad = (name: string) => (loads[name] = loadavg());
const load1 = (name: string) => (loads[name] ? loads[name][0].toFixed(1) : '–');

/** A phase left out (SOAK_PHASES) loads nothing and measures nothing. */
const skipped: LoadResult = { errors: {}, byStatus: {}, routes: {}, headersP99: {}, sent: 0, failures: {} };
const runPhase = async (name: LoadSpec['phase'], seconds?: number) => {
  setPhase(name);
  if (!PHASES.includes(name)) return { result: Promise.resolve(skipped), p99: NaN };
  const result = load(name, seconds);
  const p99 = await probe(result);
  noteLoad(name);
  return { result, p99 };
};
const { result: fuzz, p99: fuzzP99 } = await runPhase('fuzz');
const { result: streams, p99: streamsP99 } = await runPhase('streams');
const peaks = (await (sims.send('report'), message<{ peak: number[] }>(sims, 'peak'))).peak;
const { result: abuse, p99: abuseP99 } = await runPhase('abuse', SECONDS / 2);

setPhase('after');
await new Promise((r) => setTimeout(r, AFTER * 1000)); // let sockets, buffers and V8's pages go
const endSample = await memory.sample();
const rssEnd = endSample.rssMb;
lookInside('end');
let trimmed: MemorySample | undefined;
if (TRIM_PROBE) {
  const gdb = spawnSync('gdb', ['-p', String(pid), '-batch', '-ex', 'call (int)malloc_trim(0)'], { encoding: 'utf8' });
  if (gdb.status !== 0) console.log(`SOAK_TRIM_PROBE: gdb failed: ${gdb.stderr.trim().split('\n').pop()}`);
  else trimmed = await (setPhase('trimmed'), new Promise((r) => setTimeout(r, 500)).then(() => memory.sample()));
}
memory.stop();
clearInterval(delaySampler);
const metrics = await (await fetch(`${agent.admin}/metrics`)).text();
const releasesAtEnd = gauge(metrics, 'memory_releases_total') / 1000;
const crashed = agent.child.exitCode !== null;
// SOAK_END_SIGNAL=SIGKILL leaves a profiler's record as it was at the end reading (no shutdown frees).
await stopAgent(agent, (process.env.SOAK_END_SIGNAL ?? 'SIGTERM') as NodeJS.Signals);
await client.close();
sims.send('stop');
probePod.send('stop');

const results = { fuzz: await fuzz, streams: await streams, abuse: await abuse };
for (const r of Object.values(results)) for (const [k, n] of Object.entries(r.errors)) count(k, n);
const gossipDrops = metrics
  .split('\n')
  .filter((l) => l.startsWith('kinference_gossip_dropped_total') && !l.endsWith(' 0'))
  .join(', ');
const ms = (v: number) => (Number.isFinite(v) ? v.toFixed(1) : '–');
const worst = (xs: number[] | undefined) => (xs && xs.length > 0 ? Math.max(...xs.filter(Number.isFinite)) : NaN);
const median = (xs: number[] | undefined) => {
  const s = (xs ?? []).filter(Number.isFinite).sort((a, b) => a - b);
  return s.length > 0 ? s[Math.floor(s.length / 2)] : NaN;
};

console.log(
  `node ${process.version} ${launch.nodeFlags.join(' ')} ${launch.main ? 'dist/ (as the image)' : 'TypeScript sources'}; fuzz ${FUZZ}, streams ${STREAMS} x ${SECONDS}s, slowloris ${SLOWLORIS}, 4 x 3 MB bodies, gossip flood 20k datagrams/s; abuse: ${ABUSE.join(' + ')}; bodyWorkers ${BODY_WORKERS ?? 'default'}`,
);
console.log(
  `load average (1 min) at the end of fuzz ${load1('fuzz')}, streams ${load1('streams')}, abuse ${load1('abuse')}; phases run: ${PHASES.join(', ')}`,
);
console.log(`memory over time (agent process):\n${memory.table()}`);
const within = rssEnd <= rssStart * 1.2;
const pct = (a: number, b: number) => `${b >= a ? '+' : ''}${Math.round((b / a - 1) * 100)}%`;
console.log(
  `RSS: start ${rssStart} MB (warm: after the idle phase's probes and ${WARM_QUIET} s quiet; ${rssLaunch} MB 2 s after launch), end ${rssEnd} MB: ${pct(rssStart, rssEnd)} of the start (${pct(rssLaunch, rssEnd)} of the launch reading): ${within ? 'back within 20% of its start' : 'NOT back within 20% of its start'}; idle memory releases: ${releasesAtStart} before the load, ${releasesAtEnd - releasesAtStart} after it`,
);
if (trimmed)
  console.log(
    `after malloc_trim(0) in the agent (gdb; diagnostic, after the verdict's reading): RSS ${endSample.rssMb} -> ${trimmed.rssMb} MB, glibc main heap ${endSample.brkMb} -> ${trimmed.brkMb}, other anon ${endSample.anonMb} -> ${trimmed.anonMb}: ${endSample.rssMb - trimmed.rssMb} MB of what stayed was free memory glibc kept (${pct(rssStart, trimmed.rssMb)} of the start)`,
  );
for (const line of inside) console.log(line);
const abuseRatio = abuseP99 / idleP99;
console.log(
  `probe p99: idle ${ms(idleP99)} ms, fuzz ${ms(fuzzP99)} ms, ${STREAMS} streams ${ms(streamsP99)} ms, slowloris + large bodies + gossip flood ${ms(abuseP99)} ms (${abuseRatio.toFixed(2)}x idle: ${abuseRatio <= 2 ? 'within 2x' : 'NOT within 2x'})`,
);
console.log(
  `agent event-loop delay by phase, ms (median / worst of ~1 s windows' p99; worst max; 10 ms resolution): ${[
    'idle',
    'warm',
    'fuzz',
    'streams',
    'abuse',
    'after',
  ]
    .map(
      (p) => `${p} ${ms(median(loopDelay[p]?.p99))} / ${ms(worst(loopDelay[p]?.p99))}; ${ms(worst(loopDelay[p]?.max))}`,
    )
    .join(' | ')}`,
);
console.log(
  `probe process's own event-loop delay, worst max per phase, ms: ${Object.entries(ownDelayMax)
    .map(([p, v]) => `${p} ${ms(v)}`)
    .join(', ')}`,
);
console.log(`fuzz answers by status: ${JSON.stringify(results.fuzz.byStatus)}`);
const podRoutes = Object.entries(results.streams.routes).filter(([r]) => r.includes('pod-'));
const streamTotal = podRoutes.reduce((s, [, n]) => s + n, 0);
const capped = peaks.every((p) => p <= POD_CAP);
console.log(
  `streams by route: ${JSON.stringify(results.streams.routes)}; per pod: ${podRoutes
    .map(
      ([r, n]) =>
        `${r} ${Math.round((n / streamTotal) * 100)}% of streams, time to headers p99 ${results.streams.headersP99[r]} ms`,
    )
    .join(
      '; ',
    )}; most held at once: ${peaks.map((p, i) => `pod-${i} ${p}`).join(', ')} (cap ${POD_CAP}): ${capped ? 'no pod past its cap, no pool queue' : 'a pod held more than its cap'}`,
);
console.log(`gossip: ${gossipDrops}`);
console.log(
  `requests without an answer, by error: ${JSON.stringify({ fuzz: results.fuzz.failures, streams: results.streams.failures, abuse: results.abuse.failures })}`,
);
console.log(`crashed: ${crashed}; errors (5xx, lost streams, connection errors): ${JSON.stringify(errors)}`);
const ok = !crashed && Object.keys(errors).length === 0 && within && abuseRatio <= 2 && capped;
console.log(`acceptance (issue 12): ${ok ? 'holds' : 'does NOT hold'}`);
process.exit(ok ? 0 : 1);
