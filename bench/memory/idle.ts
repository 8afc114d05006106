// The agent's idle memory at 1,000 known pods, several builds side by side in one run: each tree's
// compiled agent (dist/, built here) run as the image runs it (IMAGE_NODE_FLAGS, IMAGE_ENV), each
// with its own 125 gossiping peers (bench/memory/peers.ts) and the one fast upstream, no API load.
// Gossip TTL 60 s (not the bench's 10 s), so the pods stay known when a loaded machine slows the
// peers. Once every agent knows the pods, one request each (so the agent's idle memory release runs
// after --settle s, as after bench:memory's runs), then --samples readings --every s apart; prints
// the median of each figure: RSS split by kind (the node binary's and other files' pages, glibc's
// main heap, other anonymous memory) and V8's heap (total, used, code, external).
//   node bench/memory/idle.ts [--before DIR ...] [--settle 20] [--samples 5] [--every 4]
//   --flags="…"   node flags for every agent (default: the image's)
//   --snapshot    also write a heap snapshot of each idle agent (SIGUSR2) into its tree's root
import { spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { freeUdpPort, runAgent, stopAgent, type AgentProcess } from '../../test/helpers/process.ts';
import { IMAGE_ENV, IMAGE_NODE_FLAGS } from '../process-memory.ts';
import { BENCH_MODEL, benchAgentConfig, startHelper } from './launch.ts';

const { values } = parseArgs({
  options: {
    before: { type: 'string', multiple: true, default: [] },
    settle: { type: 'string', default: '20' },
    samples: { type: 'string', default: '5' },
    every: { type: 'string', default: '4' },
    nodes: { type: 'string', default: '125' },
    pods: { type: 'string', default: '8' },
    flags: { type: 'string', default: IMAGE_NODE_FLAGS.join(' ') },
    snapshot: { type: 'boolean', default: false },
  },
});
const here = new URL('.', import.meta.url).pathname;
const roots = [...values.before!.map((d) => resolve(d)), resolve(here, '../..')];
const work = mkdtempSync(join(tmpdir(), 'kinference-bench-idle-'));
const children: ChildProcess[] = [];
const sleep = (s: number) => new Promise((r) => setTimeout(r, s * 1000));

const start = (script: string, args: string[], ready: RegExp) => startHelper(children, join(here, script), args, ready);

/** Resident kB by kind from /proc/<pid>/smaps: the node binary, other files, brk heap, other anonymous. */
function smapsOf(pid: number): Record<'node' | 'files' | 'brk' | 'anon' | 'rss', number> {
  const out = { node: 0, files: 0, brk: 0, anon: 0, rss: 0 };
  let kind: keyof typeof out = 'anon';
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const mapping = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (mapping) {
      const name = mapping[1];
      kind =
        name === '[heap]'
          ? 'brk'
          : name === ''
            ? 'anon'
            : /\/node$/.test(name)
              ? 'node'
              : name.startsWith('/')
                ? 'files'
                : 'anon';
    } else if (line.startsWith('Rss:')) {
      const kb = Number(line.slice(4).trim().split(' ')[0]);
      out[kind] += kb;
      out.rss += kb;
    }
  }
  return out;
}

/** A sample's value from a Prometheus page, in MB (NaN when absent). */
function gauge(page: string, series: string): number {
  const line = page.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? NaN : Number(line.slice(series.length + 1)) / 2 ** 20;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const MODEL = BENCH_MODEL;

try {
  const flags = values.flags!.split(' ').filter(Boolean);
  if (values.snapshot) flags.push('--heapsnapshot-signal=SIGUSR2');
  for (const root of roots) {
    const built = spawnSync('npm', ['run', 'build'], { cwd: root, encoding: 'utf8' });
    if (built.status !== 0) throw new Error(`npm run build failed in ${root}:\n${built.stdout}${built.stderr}`);
  }
  const upstream = `127.0.0.1:${(await start('../proxy/upstream.ts', [], /listening (\d+)/))[1]}`;
  process.env.KINFERENCE_BENCH_GOSSIP_KEY = 'bench-memory-gossip-key-0123456789';
  const agents: AgentProcess[] = [];
  for (const [i, root] of roots.entries()) {
    const gossipPort = await freeUdpPort();
    const peerArgs = [
      '--nodes',
      values.nodes!,
      '--pods',
      values.pods!,
      '--agent',
      `127.0.0.1:${gossipPort}`,
      '--ttl-ms',
      '60000',
    ];
    const peers = JSON.parse(
      (await start('peers.ts', [...peerArgs, '--pod', upstream], /peers (\[.*\])\n/))[1],
    ) as string[];
    const config = join(work, `agent-${i}.yaml`);
    writeFileSync(config, stringify(benchAgentConfig(gossipPort, peers, upstream, '60s')));
    const main = join(root, 'dist/agent/cli/main.js');
    agents.push(await runAgent(config, { ...IMAGE_ENV, ...process.env }, { nodeFlags: flags, main }));
  }
  const wanted = Number(values.nodes) * Number(values.pods);
  const known = async (a: AgentProcess) =>
    ((await (await fetch(`${a.admin}/debug/state`)).json()) as { pods: { remoteKnown: number } }).pods.remoteKnown;
  for (let i = 0; i < 150; i++) {
    const counts = await Promise.all(agents.map(known));
    if (counts.every((c) => c >= wanted)) break;
    await sleep(0.2);
  }
  for (const a of agents) {
    const res = await fetch(`${a.api}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say ok.' }], max_tokens: 2 }),
    });
    if (res.status !== 200) throw new Error(`agent answered ${res.status}: ${await res.text()}`);
  }
  await sleep(Number(values.settle));
  const rows = agents.map(() => [] as Record<string, number>[]);
  for (let s = 0; s < Number(values.samples); s++) {
    for (const [i, a] of agents.entries()) {
      const page = await (await fetch(`${a.admin}/metrics`)).text();
      const m = smapsOf(a.child.pid!);
      rows[i].push({
        rss: m.rss / 1024,
        node: m.node / 1024,
        files: m.files / 1024,
        brk: m.brk / 1024,
        anon: m.anon / 1024,
        v8Total: gauge(page, 'kinference_nodejs_heap_size_total_bytes'),
        v8Used: gauge(page, 'kinference_nodejs_heap_size_used_bytes'),
        code: gauge(page, 'kinference_nodejs_heap_space_size_used_bytes{space="code"}'),
        external: gauge(page, 'kinference_nodejs_external_memory_bytes'),
        known: await known(a),
      });
    }
    await sleep(Number(values.every));
  }
  if (values.snapshot) {
    for (const a of agents) a.child.kill('SIGUSR2');
    await sleep(15);
  }
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  console.log(
    `bench/memory/idle: node ${process.version}, flags "${flags.join(' ')}", ${wanted} known pods, medians of ${values.samples} samples (MB), load ${load}`,
  );
  const keys = ['rss', 'node', 'files', 'brk', 'anon', 'v8Total', 'v8Used', 'code', 'external', 'known'];
  console.log(['tree'.padEnd(28), ...keys.map((k) => k.padStart(8))].join(''));
  for (const [i, root] of roots.entries()) {
    const cells = keys.map((k) =>
      median(rows[i].map((r) => r[k]))
        .toFixed(k === 'known' ? 0 : 1)
        .padStart(8),
    );
    console.log([root.slice(-28).padEnd(28), ...cells].join(''));
  }
  for (const a of agents) await stopAgent(a);
} finally {
  for (const child of children) child.kill('SIGTERM');
  rmSync(work, { recursive: true, force: true });
}
