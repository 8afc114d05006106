// Where an agent process's memory is, read from outside it: the kernel's view of the resident
// pages (split into glibc's main heap, other anonymous memory and mapped files) and V8's view from
// the agent's own /metrics. Used by `npm run soak` and `npm run bench:memory` to tell a JS leak
// (V8 heap grows), native buffers (external grows) and allocator or V8 page retention (RSS grows,
// both flat) apart.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface MemorySample {
  /** Seconds since the sampler started. */
  s: number;
  phase: string;
  rssMb: number;
  /** glibc's main arena (the brk heap): native allocations made on the main thread. */
  brkMb: number;
  /** Other anonymous memory: V8's heap pages, thread arenas, stacks. */
  anonMb: number;
  /** Pages given back with madvise(MADV_FREE): counted in RSS until the kernel needs them. */
  lazyFreeMb: number;
  v8TotalMb: number;
  v8UsedMb: number;
  externalMb: number;
}

const mb = (kb: number) => Math.round(kb / 1024);

/** Resident memory of `pid` by kind, from /proc/<pid>/smaps. */
export function residentOf(pid: number): { rssMb: number; brkMb: number; anonMb: number; lazyFreeMb: number } {
  let rss = 0;
  let lazyFree = 0;
  let brk = 0;
  let anon = 0;
  let kind: 'brk' | 'anon' | 'file' = 'file';
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const mapping = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (mapping) {
      const name = mapping[1];
      kind = name === '[heap]' ? 'brk' : name === '' ? 'anon' : 'file';
    } else if (line.startsWith('Rss:')) {
      const kb = Number(line.slice(4).trim().split(' ')[0]);
      rss += kb;
      if (kind === 'brk') brk += kb;
      else if (kind === 'anon') anon += kb;
    } else if (line.startsWith('LazyFree:')) {
      lazyFree += Number(line.slice(9).trim().split(' ')[0]);
    }
  }
  return { rssMb: mb(rss), brkMb: mb(brk), anonMb: mb(anon), lazyFreeMb: mb(lazyFree) };
}

/** A gauge from a Prometheus page, in MB (NaN when absent). */
export function gaugeMb(page: string, name: string): number {
  const value = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)`, 'm').exec(page)?.[1];
  return value === undefined ? NaN : Math.round(Number(value) / 1024 / 1024);
}

/** Samples `pid` every `everyMs`; the agent's admin URL gives V8's figures. */
export class MemorySampler {
  readonly samples: MemorySample[] = [];
  phase = 'start';
  readonly #started = Date.now();
  readonly #timer: NodeJS.Timeout;
  readonly #pid: number;
  readonly #admin: string;

  constructor(pid: number, admin: string, everyMs = 5000) {
    this.#pid = pid;
    this.#admin = admin;
    this.#timer = setInterval(() => void this.sample(), everyMs);
  }

  async sample(): Promise<MemorySample> {
    const page = await fetch(`${this.#admin}/metrics`)
      .then((r) => r.text())
      .catch(() => '');
    const sample: MemorySample = {
      s: Math.round((Date.now() - this.#started) / 1000),
      phase: this.phase,
      ...residentOf(this.#pid),
      v8TotalMb: gaugeMb(page, 'kinference_nodejs_heap_size_total_bytes'),
      v8UsedMb: gaugeMb(page, 'kinference_nodejs_heap_size_used_bytes'),
      externalMb: gaugeMb(page, 'kinference_nodejs_external_memory_bytes'),
    };
    this.samples.push(sample);
    return sample;
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  /** One line per sample: time, phase, RSS and where it is. */
  table(): string {
    const rows = this.samples.map(
      (m) =>
        `${String(m.s).padStart(5)}s ${m.phase.padEnd(8)} ${String(m.rssMb).padStart(5)} | ${String(m.brkMb).padStart(5)} ${String(m.anonMb).padStart(5)} ${String(m.lazyFreeMb).padStart(5)} | ${String(m.v8TotalMb).padStart(5)} ${String(m.v8UsedMb).padStart(5)} ${String(m.externalMb).padStart(5)}`,
    );
    return ['  time  phase      RSS |   brk  anon  lazy | V8 total used external   (MB)', ...rows].join('\n');
  }
}

/**
 * The node flags the container image runs the agent with (Dockerfile ENTRYPOINT, kept equal by
 * test/manifests.test.ts): the soak and bench:memory measure the agent as it is deployed.
 */
export const IMAGE_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=16'];

/**
 * glibc malloc settings of the image (Dockerfile ENV, checked the same way). MALLOC_MMAP_THRESHOLD_:
 * buffers of 1 MiB and more (large request bodies) get their own mapping, returned when freed; by
 * default glibc raises the threshold to the largest buffer freed (up to 32 MiB), after which such
 * buffers come from the main heap and fragment it (+27 MB kept after the soak's 3 MB bodies).
 * MALLOC_ARENA_MAX=2: worker threads (V8's, libuv's) share two arenas instead of one each; the
 * arenas otherwise kept 5–10 MB freed after the soak's 1,000 streams (docs/benchmarks.md, "Soak").
 */
export const IMAGE_ENV: Readonly<Record<string, string>> = {
  MALLOC_MMAP_THRESHOLD_: '1048576',
  MALLOC_ARENA_MAX: '2',
};

/**
 * How the agent is started for a memory measurement: as the image runs it (compiled by
 * `npm run build`, with IMAGE_NODE_FLAGS and IMAGE_ENV), or from the TypeScript sources
 * (`source`, glibc's defaults) with `flags`; `root` is the tree (default this one; bench:memory's
 * `--before DIR` runs another).
 */
export function imageLaunch(
  entry: 'image' | 'source',
  flags: readonly string[] = IMAGE_NODE_FLAGS,
  root = new URL('..', import.meta.url).pathname,
): { nodeFlags: readonly string[]; main?: string; env: Readonly<Record<string, string>> } {
  if (entry === 'source') return { nodeFlags: flags, env: {} };
  const built = spawnSync('npm', ['run', 'build'], { cwd: root, encoding: 'utf8' });
  if (built.status !== 0) throw new Error(`npm run build failed:\n${built.stdout}${built.stderr}`);
  return { nodeFlags: flags, main: join(root, 'dist/agent/cli/main.js'), env: IMAGE_ENV };
}

/** One glibc arena as malloc_info(3) reports it, in MB: what it holds from the system and what of that is free. */
export interface ArenaUse {
  /** 0 is the main arena (the brk heap); the rest are thread arenas. */
  arena: number;
  systemMb: number;
  freeMb: number;
  inUseMb: number;
}

/**
 * glibc's own accounting of `pid`'s arenas (malloc_info, called in the process through gdb; the
 * process pauses for the ~1 s gdb takes): how much of each heap is live allocations and how much
 * free memory glibc keeps. Undefined when gdb cannot attach. A diagnostic, not for the verdict.
 */
export function arenasOf(pid: number): { arenas: ArenaUse[]; mmapMb: number } | undefined {
  const file = join(tmpdir(), `kinference-malloc-info-${pid}-${Date.now()}.xml`);
  const gdb = spawnSync(
    'gdb',
    [
      '-p',
      String(pid),
      '-batch',
      '-ex',
      `call (void*)fopen("${file}", "w")`,
      '-ex',
      'call (int)malloc_info(0, $1)',
      '-ex',
      'call (int)fclose($1)',
    ],
    { encoding: 'utf8' },
  );
  if (gdb.status !== 0) return undefined;
  let xml: string;
  try {
    xml = readFileSync(file, 'utf8');
    rmSync(file);
  } catch {
    return undefined;
  }
  const mb2 = (bytes: number) => Math.round((bytes / 1024 / 1024) * 10) / 10;
  const size = (text: string, tag: string, type: string) =>
    Number(new RegExp(`<${tag} type="${type}"(?: count="\\d+")? size="(\\d+)"/>`).exec(text)?.[1] ?? 0);
  const arenas = [...xml.matchAll(/<heap nr="(\d+)">([\s\S]*?)<\/heap>/g)].map(([, nr, body]) => {
    const system = size(body, 'system', 'current');
    const free = size(body, 'total', 'fast') + size(body, 'total', 'rest');
    return { arena: Number(nr), systemMb: mb2(system), freeMb: mb2(free), inUseMb: mb2(system - free) };
  });
  const tail = xml.slice(xml.lastIndexOf('</heap>'));
  return { arenas, mmapMb: mb2(size(tail, 'total', 'mmap')) };
}

/** `pid`'s TCP sockets by local or remote port (from its fds and /proc/<pid>/net/tcp{,6}): who holds connections. */
export function socketsOf(pid: number, ports: Readonly<Record<string, number>>): Record<string, number> {
  const inodes = new Set<string>();
  let fds = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    fds++;
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]);
    } catch {
      // closed between the listing and the read
    }
  }
  const out: Record<string, number> = { fds, sockets: inodes.size };
  const byPort = new Map(Object.entries(ports).map(([name, port]) => [port, name]));
  for (const table of ['tcp', 'tcp6']) {
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || !inodes.has(f[9])) continue;
      const local = parseInt(f[1].split(':')[1], 16);
      const remote = parseInt(f[2].split(':')[1], 16);
      const state = f[3] === '0A' ? 'listen' : f[3] === '01' ? 'open' : `state ${f[3]}`;
      const who = byPort.get(remote) ?? (byPort.has(local) ? `${byPort.get(local)} (in)` : 'other');
      const key = `${who} ${state}`;
      out[key] = (out[key] ?? 0) + 1;
    }
  }
  return out;
}
