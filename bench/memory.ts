// `npm run bench:memory`: the agent's memory at 1,000 known pods, through two saturation runs.
// One agent process (run with the image's node flags) in front of one trivially fast upstream
// (bench/proxy/upstream.ts), 125 peer agents' gossip announcing 8 pods each (bench/memory/peers.ts),
// then wrk with 64 connections for --duration s (non-streamed and streamed requests, 3:1), a rest,
// the same again, a rest. Prints the agent's RSS over time and where it is (glibc's main heap,
// other anonymous memory, V8's heap, external buffers), and whether the second run stays flat.
//   --duration S   per saturation run (default 300)   --rest S   after each run (default 60)
//   --nodes N --pods M   peers and pods per peer (default 125 x 8 = 1,000 known pods)
//   --flags="…"    node flags for the agent (default: the image's, IMAGE_NODE_FLAGS)
//   --entry image|source   compiled dist/ as the image runs it (default), or the TypeScript sources
//   --before DIR   also run the agent of another tree (built there), side by side: each agent with
//                  its own peers and its own wrk, all saturated at the same time (repeatable)
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { freeUdpPort, runAgent, stopAgent, type AgentProcess } from '../test/helpers/process.ts';
import { IMAGE_NODE_FLAGS, imageLaunch, MemorySampler, type MemorySample } from './process-memory.ts';
import { BENCH_MODEL, benchAgentConfig, startHelper } from './memory/launch.ts';

const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '300' },
    rest: { type: 'string', default: '60' },
    nodes: { type: 'string', default: '125' },
    pods: { type: 'string', default: '8' },
    flags: { type: 'string', default: IMAGE_NODE_FLAGS.join(' ') },
    entry: { type: 'string', default: 'image' },
    before: { type: 'string', multiple: true, default: [] },
  },
});
const here = new URL('.', import.meta.url).pathname;
const WRK = ['/usr/bin/wrk', '/usr/local/bin/wrk'].find((p) => existsSync(p));
if (!WRK) throw new Error('bench:memory needs wrk (apt-get install wrk) for its saturation runs');
const work = mkdtempSync(join(tmpdir(), 'kinference-bench-memory-'));
const children: ChildProcess[] = [];
const sleep = (s: number) => new Promise((r) => setTimeout(r, s * 1000));

const start = (script: string, args: string[], ready: RegExp, env = process.env) =>
  startHelper(children, join(here, script), args, ready, env);

const MODEL = BENCH_MODEL;
const wrkScript = join(work, 'mixed.lua');
const body = (stream: boolean) =>
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say ok.' }], max_tokens: 2, stream });
// Every fourth request streamed: both relays stay under load.
writeFileSync(
  wrkScript,
  `local n = 0
request = function()
  n = n + 1
  local body = (n % 4 == 0) and '${body(true)}' or '${body(false)}'
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, body)
end
`,
);

/** wrk against the agent for `seconds`; completed requests per second and errors. */
function saturate(api: string, seconds: number): Promise<{ perS: number; errors: string }> {
  return new Promise((resolve) => {
    const child = spawn(WRK!, ['-t1', '-c64', `-d${seconds}s`, '-s', wrkScript, `${api}/v1/chat/completions`]);
    children.push(child);
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.once('exit', () =>
      resolve({
        perS: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN),
        errors: [/Non-2xx or 3xx responses: \d+/.exec(out)?.[0], /Socket errors: .*/.exec(out)?.[0]]
          .filter(Boolean)
          .join('; '),
      }),
    );
  });
}

/** One agent under test: its tree, its peers, its process and its memory samples. */
interface Target {
  label: string;
  agent: AgentProcess;
  memory: MemorySampler;
  idle?: MemorySample;
  /** Pods the agent knew through gossip before the first run. */
  knownIdle?: number;
  runs: { n: number; perS: number; errors: string; peak: number; after: MemorySample; known: number }[];
}

try {
  const DURATION = Number(values.duration);
  const REST = Number(values.rest);
  const roots = [...values.before!.map((d) => resolve(d)), resolve(here, '..')];
  if (roots.length > 1 && values.entry === 'source')
    throw new Error('--before compares compiled trees (--entry image)');
  const upstream = `127.0.0.1:${(await start('proxy/upstream.ts', [], /listening (\d+)/))[1]}`;
  process.env.KINFERENCE_BENCH_GOSSIP_KEY = 'bench-memory-gossip-key-0123456789';
  const flags = values.flags!.split(' ').filter(Boolean);
  const targets: Target[] = [];
  let launch: ReturnType<typeof imageLaunch> | undefined;
  for (const [i, root] of roots.entries()) {
    // Each agent has its own 125 peers (the peers' process gossips to one agent).
    const gossipPort = await freeUdpPort();
    const peers = JSON.parse(
      (
        await start(
          'memory/peers.ts',
          ['--nodes', values.nodes!, '--pods', values.pods!, '--agent', `127.0.0.1:${gossipPort}`, '--pod', upstream],
          /peers (\[.*\])\n/,
        )
      )[1],
    ) as string[];
    const config = join(work, `agent-${i}.yaml`);
    writeFileSync(config, stringify(benchAgentConfig(gossipPort, peers, upstream, '10s')));
    launch = imageLaunch(values.entry === 'source' ? 'source' : 'image', flags, root);
    // A loaded shared machine can take longer than runAgent's 10 s to start one: try again.
    let agent: AgentProcess | undefined;
    for (let attempt = 1; !agent; attempt++)
      agent = await runAgent(config, { ...launch.env, ...process.env }, launch).catch((error: unknown) => {
        if (attempt === 3) throw error;
        return undefined;
      });
    targets.push({
      label: roots.length > 1 ? root : 'agent',
      agent,
      memory: new MemorySampler(agent.child.pid!, agent.admin),
      runs: [],
    });
  }
  const known = async (t: Target) => {
    const state = (await (await fetch(`${t.agent.admin}/debug/state`)).json()) as { pods: { remoteKnown: number } };
    return state.pods.remoteKnown;
  };
  const wanted = Number(values.nodes) * Number(values.pods);
  // Up to 2 minutes: on a loaded machine the peers' process takes a while to announce every pod.
  for (let i = 0; i < 600 && (await Promise.all(targets.map(known))).some((k) => k < wanted); i++) await sleep(0.2);
  for (const t of targets) t.memory.phase = 'idle';
  await sleep(10);
  for (const t of targets) {
    t.idle = await t.memory.sample();
    t.knownIdle = await known(t);
  }
  for (const n of [1, 2]) {
    for (const t of targets) t.memory.phase = `run ${n}`;
    // Side by side: every agent saturated at once, each by its own wrk, so they share the machine's load.
    const loads = await Promise.all(targets.map((t) => saturate(t.agent.api, DURATION)));
    for (const t of targets) t.memory.phase = `rest ${n}`;
    await sleep(REST);
    for (const [i, t] of targets.entries()) {
      const peak = Math.max(...t.memory.samples.filter((m) => m.phase === `run ${n}`).map((m) => m.rssMb));
      t.runs.push({ n, ...loads[i], peak, after: await t.memory.sample(), known: await known(t) });
    }
  }
  for (const t of targets) {
    t.memory.stop();
    await stopAgent(t.agent);
  }
  const wrkVersion = spawnSync(WRK, ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0];
  console.log(
    `bench:memory: node ${process.version}, agent ${launch!.main ? 'dist/ (as the image)' : 'TypeScript sources'} with "${flags.join(' ')}", ${wanted} known pods (${values.nodes} peers x ${values.pods}), ${wrkVersion.split(' ').slice(0, 2).join(' ')} -c64 ${DURATION} s x 2, rest ${REST} s${targets.length > 1 ? `, ${targets.length} agents side by side` : ''}`,
  );
  for (const t of targets) {
    console.log(`\n${t.label}:`);
    console.log(t.memory.table());
    console.log(`idle: RSS ${t.idle!.rssMb} MB (V8 heap ${t.idle!.v8TotalMb} MB); known pods ${t.knownIdle}`);
    for (const r of t.runs)
      console.log(
        `run ${r.n}: ${Math.round(r.perS)} req/s${r.errors ? ` (${r.errors})` : ''}, RSS peak ${r.peak} MB, ${REST} s after ${r.after.rssMb} MB (V8 heap ${r.after.v8TotalMb} MB, used ${r.after.v8UsedMb} MB, external ${r.after.externalMb} MB); known pods ${r.known}`,
      );
    const [first, second] = t.runs;
    console.log(
      `after the 2nd run vs the 1st: ${second.after.rssMb - first.after.rssMb >= 0 ? '+' : ''}${second.after.rssMb - first.after.rssMb} MB; ` +
        `≤ 250 MB under saturation: ${Math.max(first.peak, second.peak) <= 250 ? 'yes' : 'no'}; ` +
        `≤ 150 MB ${REST} s after: ${Math.max(first.after.rssMb, second.after.rssMb) <= 150 ? 'yes' : 'no'}`,
    );
  }
  if (targets.length > 1) {
    console.log('\nside by side (MB): idle | peak run 1 / run 2 | after run 1 → run 2 | req/s run 1 / run 2');
    for (const t of targets) {
      const [a, b] = t.runs;
      console.log(
        `${t.label}: ${t.idle!.rssMb} | ${a.peak} / ${b.peak} | ${a.after.rssMb} → ${b.after.rssMb} | ${Math.round(a.perS)} / ${Math.round(b.perS)}`,
      );
    }
  }
} finally {
  for (const child of children) child.kill('SIGTERM');
  rmSync(work, { recursive: true, force: true });
}
