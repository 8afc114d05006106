// `npm run bench:proxy`: what the agent adds to a request, side by side with talking to the pod
// directly and with nginx (when installed) in front of the same pod, in one run on this machine.
// Every target proxies one trivially fast upstream (bench/proxy/upstream.ts) on loopback; the load
// comes from a separate process (bench/proxy/load.ts; wrk for the throughput point when installed).
// The agent runs with the image's node flags (IMAGE_NODE_FLAGS), as deployed.
// "bare-node" (bench/proxy/bare-node.ts) is the floor: a Node proxy that only moves the bytes
// (node:http + undici, no routing), so what Node costs and what the agent adds are told apart.
// Figures: added latency = target's p50/p99 − direct's at the same rate; CPU per request at
// 1,000 req/s and at saturation, and throughput, each also as a multiple of nginx's. Flags:
// --duration S per point (default 10), --targets direct,nginx,bare-node,kinference;
// --serial N: first, N requests per target one at a time, every target up at once and taking turns
// (bench/proxy/serial.ts): added latency with no queue anywhere, robust to a shared machine's noise;
// --serial-only: only that; and
// --before DIR: also run the agent of another checkout (e.g. `git archive <commit>` with
// node_modules linked) as target "before", for a before/after side by side in the same run;
// --before-flags "…": the "before" target's node flags instead of the image's (without --before,
// "before" is this checkout's agent: a flag change measured side by side);
// --rounds N repeats the whole sequence and prints each target's medians (the machine may be shared);
// --warm S: each target first serves at saturation, unmeasured, in 5 s windows until its CPU per
// request stops falling (a window within 5 % of the one before, or S s at most, default 60): V8
// optimizes a Node proxy's request path over its first tens of thousands of requests, and a proxy
// serves millions; nginx and direct get the same warm-up (they settle in two windows), so every
// figure is steady state. The windows are printed;
// --load-client raw|undici: the open-loop points' client (bench/proxy/load.ts; raw, the default,
// pre-opened kept-alive sockets: undici's Pool in the generator made direct's own p99 at 1,000/s
// 20-45 ms on a quiet machine, raw 1.6-4.8). The p99 table also shows the generator's lateness.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { IMAGE_NODE_FLAGS } from './process-memory.ts';

const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '10' },
    targets: { type: 'string', default: 'direct,nginx,bare-node,kinference' },
    before: { type: 'string' },
    'before-flags': { type: 'string' },
    rounds: { type: 'string', default: '1' },
    serial: { type: 'string', default: '0' },
    'serial-only': { type: 'boolean', default: false },
    'load-client': { type: 'string', default: 'raw' },
    warm: { type: 'string', default: '60' },
  },
});
const here = new URL('.', import.meta.url).pathname;
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
const WRK = ['/usr/bin/wrk', '/usr/local/bin/wrk'].find((p) => existsSync(p));
const work = mkdtempSync(join(tmpdir(), 'kinference-bench-proxy-'));
const children: ChildProcess[] = [];

/** Starts a process and resolves with the first stdout match of `ready`. */
function start(
  cmd: string,
  args: string[],
  ready: RegExp,
  env: NodeJS.ProcessEnv = process.env,
): Promise<RegExpExecArray> {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  children.push(child);
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${cmd} did not start:\n${output}`)), 15_000);
    const onData = (d: Buffer) => {
      output += d;
      const match = ready.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(match);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${cmd} exited ${code}:\n${output}`)));
  });
}

function freePort(): number {
  // Ask the kernel for a port in a child (synchronously) so nginx's config can name it.
  const out = spawnSync(process.execPath, [
    '-e',
    "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})",
  ]);
  return Number(String(out.stdout).trim());
}

async function startUpstream(): Promise<string> {
  const match = await start(process.execPath, [join(here, 'proxy/upstream.ts')], /listening (\d+)/);
  return `127.0.0.1:${match[1]}`;
}

async function startNginx(upstream: string): Promise<string> {
  const port = freePort();
  const conf = `worker_processes 1;
daemon off;
pid ${work}/nginx.pid;
error_log ${work}/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${work}/body; proxy_temp_path ${work}/proxy;
  fastcgi_temp_path ${work}/fcgi; uwsgi_temp_path ${work}/uwsgi; scgi_temp_path ${work}/scgi;
  upstream pod { server ${upstream}; keepalive 128; }
  server {
    listen 127.0.0.1:${port};
    location / { proxy_pass http://pod; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
`;
  writeFileSync(join(work, 'nginx.conf'), conf);
  const child = spawn(NGINX!, ['-e', join(work, 'nginx-error.log'), '-p', work, '-c', join(work, 'nginx.conf')], {
    stdio: 'ignore',
  });
  children.push(child);
  await waitForPort(port);
  return `127.0.0.1:${port}`;
}

async function startBareNode(upstream: string): Promise<string> {
  const match = await start(
    process.execPath,
    [join(here, 'proxy/bare-node.ts'), '--upstream', upstream],
    /listening (\d+)/,
  );
  return `127.0.0.1:${match[1]}`;
}

async function startAgent(upstream: string, root = join(here, '..'), nodeFlags = IMAGE_NODE_FLAGS): Promise<string> {
  const config = join(work, 'agent.yaml');
  writeFileSync(
    config,
    `node: bench
listen: {api: "127.0.0.1:0", admin: "127.0.0.1:0"}
scrapeInterval: 100ms
pods:
  - {name: fast-0, namespace: bench, address: "${upstream}", engine: vllm, models: [bench-model]}
`,
  );
  const match = await start(
    process.execPath,
    [...nodeFlags, join(root, 'agent/cli/main.ts'), 'agent', '--config', config],
    /ready to serve on http:\/\/([\d.:]+)\/v1/,
  );
  await new Promise((r) => setTimeout(r, 500)); // a few scrapes, so the pod has an estimate
  return match[1];
}

/** The "before" target: another checkout's agent (--before), or this one with other flags (--before-flags). */
function startBefore(upstream: string): Promise<string> {
  const flags = values['before-flags']?.split(' ').filter(Boolean);
  return startAgent(upstream, values.before ?? join(here, '..'), flags ?? IMAGE_NODE_FLAGS);
}

async function waitForPort(port: number): Promise<void> {
  const { connect } = await import('node:net');
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1', () => (socket.destroy(), resolve(true)));
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nothing listens on ${port}`);
}

interface RatePoint {
  p50: number;
  p99: number;
  /** The generator's own lateness (send − schedule), p99: a tail here is the generator's, not the target's. */
  lateP99?: number;
  /** Raw client: sockets opened while timing (none idle when a request was due). */
  opened?: number;
  count: number;
  errors: number;
}

function load(url: string, args: string[]): Promise<Record<string, number>> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        join(here, 'proxy/load.ts'),
        '--url',
        url,
        '--duration',
        values.duration!,
        '--client',
        values['load-client']!,
        ...args,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`load exited ${code}`))));
  });
}

interface SerialResult {
  p50: number[];
  p90: number[];
  firstByteP50: number[];
  errors: number[];
}

function serial(ports: number[], stream: boolean): Promise<SerialResult> {
  return new Promise((resolve, reject) => {
    const args = [join(here, 'proxy/serial.ts'), '--ports', ports.join(','), '--count', values.serial!];
    const child = spawn(process.execPath, stream ? [...args, '--stream'] : args, {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`serial exited ${code}`))));
  });
}

const load1 = () => loadavg()[0].toFixed(2);

/**
 * The serial table: every target started at once, then one request at a time across all of them
 * in turn, plain and streamed. Added = target's p50 − direct's, from the same run.
 */
async function serialRound(upstream: string, wanted: string[], round: number, rounds: number): Promise<SerialRow[]> {
  const started = children.length;
  const targets: { name: string; hostPort: string }[] = [];
  const loadBefore = load1();
  for (const target of wanted) {
    if (target === 'direct') targets.push({ name: target, hostPort: upstream });
    else if (target === 'nginx' && NGINX) targets.push({ name: target, hostPort: await startNginx(upstream) });
    else if (target === 'bare-node') targets.push({ name: target, hostPort: await startBareNode(upstream) });
    else if (target === 'kinference') targets.push({ name: target, hostPort: await startAgent(upstream) });
    else if (target === 'before') targets.push({ name: target, hostPort: await startBefore(upstream) });
  }
  const ports = targets.map((t) => Number(t.hostPort.slice(t.hostPort.lastIndexOf(':') + 1)));
  await serial(ports, false); // warm-up: connections, JIT
  const plain = await serial(ports, false);
  const streamed = await serial(ports, true);
  for (const child of children.slice(started)) child.kill('SIGTERM');
  const d = targets.findIndex((t) => t.name === 'direct');
  const rows = targets.map((t, i) => ({
    name: t.name,
    p50: d >= 0 && i !== d ? plain.p50[i] - plain.p50[d] : plain.p50[i],
    p90: d >= 0 && i !== d ? plain.p90[i] - plain.p90[d] : plain.p90[i],
    ttfb: d >= 0 && i !== d ? streamed.firstByteP50[i] - streamed.firstByteP50[d] : streamed.firstByteP50[i],
    errors: plain.errors[i] + streamed.errors[i],
  }));
  console.log(
    `\nbench:proxy serial round ${round + 1}/${rounds}: ${values.serial} requests per target and kind, one at a time, targets in turn; ms; "+" = added over direct; load average ${loadBefore} → ${load1()}`,
  );
  printSerial(rows);
  return rows;
}

interface SerialRow {
  name: string;
  p50: number;
  p90: number;
  ttfb: number;
  errors: number;
}

function printSerial(rows: SerialRow[]): void {
  console.log('target       | p50 serial | p90 serial | first byte p50 serial, streamed | errors');
  const plus = (r: SerialRow, v: number) => (r.name === 'direct' ? fmt(v) : `${v >= 0 ? '+' : ''}${fmt(v)}`);
  for (const r of rows)
    console.log(
      `${r.name.padEnd(12)} | ${plus(r, r.p50).padStart(10)} | ${plus(r, r.p90).padStart(10)} | ${plus(r, r.ttfb).padStart(31)} | ${r.errors}`,
    );
}

function wrkThroughput(url: string, seconds = values.duration!): { perS: number; errors: number } {
  const script = join(work, 'post.lua');
  writeFileSync(
    script,
    `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = '{"model":"bench-model","messages":[{"role":"user","content":"Say ok."}],"max_tokens":2}'\n`,
  );
  const run = spawnSync(WRK!, ['-t1', '-c64', `-d${seconds}s`, '-s', script, url], { encoding: 'utf8' });
  const perS = Number(/Requests\/sec:\s+([\d.]+)/.exec(run.stdout)?.[1] ?? NaN);
  const errors =
    Number(/Non-2xx or 3xx responses: (\d+)/.exec(run.stdout)?.[1] ?? 0) +
    Number(
      /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/
        .exec(run.stdout)
        ?.slice(1)
        .reduce((a, b) => a + Number(b), 0) ?? 0,
    );
  return { perS, errors };
}

/** User + system CPU ms of a process and its descendants (nginx's worker is its master's child), from /proc. */
function cpuMs(pid: number): number {
  const ticksPerS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;
  const walk = (id: number): number => {
    try {
      const fields = readFileSync(`/proc/${id}/stat`, 'utf8').split(') ')[1].split(' ');
      const own = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14, 15 of stat)
      const children = readFileSync(`/proc/${id}/task/${id}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
      return own + children.reduce((sum, child) => sum + walk(Number(child)), 0);
    } catch {
      return 0;
    }
  };
  return (walk(pid) * 1000) / ticksPerS;
}

/** Saturation in 5 s windows until the CPU per request settles (see --warm); prints the windows. */
async function warmUp(name: string, url: string, pid: number): Promise<void> {
  const windowS = 5;
  const perRequest: number[] = [];
  for (let spent = 0; spent + windowS <= Number(values.warm); spent += windowS) {
    const cpuBefore = cpuMs(pid);
    const served = WRK
      ? wrkThroughput(url, String(windowS))
      : ((await load(url, ['--mode', 'max', '--connections', '64', '--duration', String(windowS)])) as {
          perS: number;
        });
    perRequest.push(((cpuMs(pid) - cpuBefore) * 1000) / (served.perS * windowS));
    const [before, last] = perRequest.slice(-2);
    if (perRequest.length >= 2 && last >= before * 0.95) break;
  }
  console.log(
    `${name}: warm-up, CPU µs/req per ${windowS} s window at saturation: ${perRequest.map(Math.round).join(', ')}`,
  );
}

/**
 * `pid`: the process doing the target's work (the upstream itself for direct). Its CPU per request
 * at the throughput point is the load-independent figure: on a shared machine a process's wall-clock
 * throughput follows the CPU it is given, its CPU per request much less so.
 */
async function measure(name: string, hostPort: string, pid: number) {
  const url = `http://${hostPort}/v1/chat/completions`;
  await warmUp(name, url, pid);
  await load(url, ['--rate', '200', '--duration', '2']);
  const plain = (await load(url, ['--rate', '200'])) as unknown as RatePoint;
  const streamed = (await load(url, ['--rate', '200', '--stream'])) as unknown as RatePoint;
  const cpuBeforeBusy = cpuMs(pid);
  const busy = (await load(url, ['--rate', '1000'])) as unknown as RatePoint;
  // CPU per request at 1,000/s: the figure of a node that is busy but not saturated.
  const cpuUsAt1000 = ((cpuMs(pid) - cpuBeforeBusy) * 1000) / (busy.count + busy.errors);
  if (busy.opened) console.log(`${name}: ${busy.opened} sockets opened while timing 1,000/s (none idle when due)`);
  const cpuBefore = cpuMs(pid);
  const max = WRK
    ? wrkThroughput(url)
    : ((await load(url, ['--mode', 'max', '--connections', '64'])) as { perS: number; errors: number });
  const cpuUsPerRequest = ((cpuMs(pid) - cpuBefore) * 1000) / (max.perS * Number(values.duration));
  return { name, plain, streamed, busy, max, cpuUsPerRequest, cpuUsAt1000 };
}

const fmt = (ms: number) => (Number.isFinite(ms) ? ms.toFixed(2) : '–');
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

type Measured = Awaited<ReturnType<typeof measure>>;
/** One target's figures in one round, relative to direct and nginx of the same round. */
interface Row {
  name: string;
  p50: number;
  ttfb: number;
  p99: number;
  lateP99: number;
  /** CPU µs per request at 1,000 req/s, and as a multiple of nginx's. */
  cpuAt1000: number;
  cpuAt1000X: number;
  perS: number;
  vsNginx: number;
  /** CPU µs per request at saturation (wrk), and as a multiple of nginx's. */
  cpuUs: number;
  cpuX: number;
  errors: number;
}

function rowsOf(results: Measured[]): Row[] {
  const direct = results.find((r) => r.name === 'direct');
  const nginx = results.find((r) => r.name === 'nginx');
  const added = (r: Measured, v: number, base: number | undefined) =>
    direct && r !== direct && base !== undefined ? v - base : v;
  return results.map((r) => ({
    name: r.name,
    p50: added(r, r.plain.p50, direct?.plain.p50),
    ttfb: added(r, r.streamed.p50, direct?.streamed.p50),
    p99: added(r, r.busy.p99, direct?.busy.p99),
    lateP99: r.busy.lateP99 ?? NaN,
    cpuAt1000: r.cpuUsAt1000,
    cpuAt1000X: nginx ? r.cpuUsAt1000 / nginx.cpuUsAt1000 : NaN,
    perS: r.max.perS,
    vsNginx: nginx ? r.max.perS / nginx.max.perS : NaN,
    cpuUs: r.cpuUsPerRequest,
    cpuX: nginx ? r.cpuUsPerRequest / nginx.cpuUsPerRequest : NaN,
    errors: r.plain.errors + r.streamed.errors + r.busy.errors + r.max.errors,
  }));
}

function printTable(title: string, rows: Row[]): void {
  console.log(`\n${title}`);
  console.log(
    'target       | p50 @200/s | TTFB p50 @200/s stream | p99 @1000/s | load.ts late p99 | CPU µs/req @1000/s | × nginx | max req/s (64 conns) | × nginx | CPU µs/req @max | × nginx | errors',
  );
  const plus = (r: Row, v: number) => (r.name === 'direct' ? fmt(v) : `${v >= 0 ? '+' : ''}${fmt(v)}`);
  for (const r of rows)
    console.log(
      `${r.name.padEnd(12)} | ${plus(r, r.p50).padStart(10)} | ${plus(r, r.ttfb).padStart(22)} | ${plus(r, r.p99).padStart(11)} | ${fmt(r.lateP99).padStart(16)} | ${Math.round(r.cpuAt1000).toString().padStart(18)} | ${fmt(r.cpuAt1000X).padStart(7)} | ${Math.round(r.perS).toString().padStart(20)} | ${fmt(r.vsNginx).padStart(7)} | ${Math.round(r.cpuUs).toString().padStart(15)} | ${fmt(r.cpuX).padStart(7)} | ${r.errors}`,
    );
}

try {
  const upstream = await startUpstream();
  const upstreamPid = children.at(-1)!.pid!;
  const wanted = values.targets!.split(',');
  if (values.before || values['before-flags']) wanted.splice(wanted.indexOf('kinference'), 0, 'before');
  const rounds = Number(values.rounds);
  const perRound: Row[][] = [];
  const serialRounds: SerialRow[][] = [];
  if (wanted.includes('nginx') && !NGINX) console.log('nginx not installed: skipped (apt-get install nginx)');
  for (let round = 0; round < rounds; round++) {
    if (Number(values.serial) > 0) serialRounds.push(await serialRound(upstream, wanted, round, rounds));
    if (values['serial-only']) continue;
    const loadBefore = load1();
    const results: Measured[] = [];
    for (const target of wanted) {
      const pid = () => children.at(-1)!.pid!;
      if (target === 'direct') results.push(await measure('direct', upstream, upstreamPid));
      else if (target === 'nginx' && NGINX) results.push(await measure('nginx', await startNginx(upstream), pid()));
      else if (target === 'bare-node') results.push(await measure('bare-node', await startBareNode(upstream), pid()));
      else if (target === 'kinference') results.push(await measure('kinference', await startAgent(upstream), pid()));
      else if (target === 'before') results.push(await measure('before', await startBefore(upstream), pid()));
      // Each proxy stops once measured, so the next one does not share the machine with it.
      if (target !== 'direct') children.at(-1)?.kill('SIGTERM');
    }
    perRound.push(rowsOf(results));
    printTable(
      `bench:proxy round ${round + 1}/${rounds}, ${values.duration} s per point, load from ${WRK ? 'wrk (throughput) and ' : ''}bench/proxy/load.ts; ms; "+" = added over direct; load average ${loadBefore} → ${load1()}`,
      perRound[round],
    );
  }
  if (rounds > 1 && serialRounds.length > 0) {
    const of = (i: number, key: 'p50' | 'p90' | 'ttfb') => median(serialRounds.map((rows) => rows[i][key]));
    console.log(`\nserial: median of ${rounds} rounds (added over direct within each round; errors summed)`);
    printSerial(
      serialRounds[0].map((first, i) => ({
        name: first.name,
        p50: of(i, 'p50'),
        p90: of(i, 'p90'),
        ttfb: of(i, 'ttfb'),
        errors: serialRounds.reduce((sum, rows) => sum + rows[i].errors, 0),
      })),
    );
  }
  if (rounds > 1 && perRound.length > 0) {
    const medians = perRound[0].map((first, i) => {
      const of = (key: keyof Omit<Row, 'name'>) => median(perRound.map((rows) => rows[i][key]));
      return {
        name: first.name,
        p50: of('p50'),
        ttfb: of('ttfb'),
        p99: of('p99'),
        lateP99: of('lateP99'),
        cpuAt1000: of('cpuAt1000'),
        cpuAt1000X: of('cpuAt1000X'),
        perS: of('perS'),
        vsNginx: of('vsNginx'),
        cpuUs: of('cpuUs'),
        cpuX: of('cpuX'),
        errors: perRound.reduce((sum, rows) => sum + rows[i].errors, 0),
      };
    });
    printTable(`median of ${rounds} rounds (each ratio is taken within its round; errors summed)`, medians);
  }
} finally {
  for (const child of children) child.kill('SIGTERM');
  rmSync(work, { recursive: true, force: true });
}
