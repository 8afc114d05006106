// Gossip between hosts: three agents, each in its own network namespace, joined by a bridge in a
// fourth ("the switch"). One host's link goes down: the others age it out (and it them); the link
// comes back: they find each other again. Needs root and iproute2; skipped otherwise.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { waitFor } from './helpers/wait.ts';

const PREFIX = `kinf-${process.pid}-`;
const SWITCH = `${PREFIX}sw`;
const HOSTS = [0, 1, 2].map((i) => ({ ns: `${PREFIX}n${i}`, id: `host-${i}`, port: `v${i}` }));
const SUBNET = `10.250.${process.pid % 250}`;
const addressOf = (i: number) => `${SUBNET}.${i + 1}`;
const GOSSIP_PORT = 7946;
const INTERVAL_MS = 100;
const TTL_MS = 1000;
const PEER = fileURLToPath(new URL('./fixtures/gossip-peer.ts', import.meta.url));

function ip(...args: string[]): void {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr || r.error}`);
}

function whyNot(): string | undefined {
  if (process.platform !== 'linux') return 'network namespaces need Linux';
  if (process.getuid?.() !== 0) return 'creating network namespaces needs root';
  const probe = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) return `iproute2 is not usable: ${probe.error?.message ?? probe.stderr}`;
  return undefined;
}

const children: ChildProcess[] = [];
const latest = new Map<string, { origins: Record<string, number> }>();

function cleanUp(): void {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  // Deleting a namespace deletes its ends of the veth pairs, and the switch its bridge.
  const listed = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout ?? '';
  for (const line of listed.split('\n')) {
    const ns = line.split(' ')[0];
    if (ns.startsWith(PREFIX)) spawnSync('ip', ['netns', 'del', ns]);
  }
}

after(cleanUp);

function buildNetwork(): void {
  ip('netns', 'add', SWITCH);
  ip('-n', SWITCH, 'link', 'set', 'lo', 'up');
  ip('-n', SWITCH, 'link', 'add', 'br0', 'type', 'bridge');
  ip('-n', SWITCH, 'link', 'set', 'br0', 'up');
  HOSTS.forEach((h, i) => {
    ip('netns', 'add', h.ns);
    ip('-n', h.ns, 'link', 'set', 'lo', 'up');
    ip('-n', SWITCH, 'link', 'add', h.port, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', h.ns);
    ip('-n', SWITCH, 'link', 'set', h.port, 'master', 'br0');
    ip('-n', SWITCH, 'link', 'set', h.port, 'up');
    ip('-n', h.ns, 'addr', 'add', `${addressOf(i)}/24`, 'dev', 'eth0');
    ip('-n', h.ns, 'link', 'set', 'eth0', 'up');
  });
}

function startPeers(key: string): void {
  HOSTS.forEach((h, i) => {
    const peers = HOSTS.map((_, j) => `${addressOf(j)}:${GOSSIP_PORT}`).filter((_, j) => j !== i);
    const args = [
      'netns',
      'exec',
      h.ns,
      process.execPath,
      PEER,
      '--id',
      h.id,
      '--bind',
      `${addressOf(i)}:${GOSSIP_PORT}`,
      '--peers',
      peers.join(','),
      '--interval',
      String(INTERVAL_MS),
      '--ttl',
      String(TTL_MS),
    ];
    const child = spawn('ip', args, {
      env: { ...process.env, KINFERENCE_GOSSIP_KEY: key },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(child);
    let buffered = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) if (line.startsWith('{')) latest.set(h.id, JSON.parse(line));
    });
  });
}

const knows = (id: string) => Object.keys(latest.get(id)?.origins ?? {}).sort();
const views = (what: string) => () => `${what}; views: ${JSON.stringify(Object.fromEntries(latest))}`;

test('agents on three hosts converge, age out a host cut off, and take it back when it returns', async (t) => {
  const reason = whyNot();
  if (reason) {
    t.skip(`multi-host gossip test skipped: ${reason}`);
    return;
  }
  buildNetwork();
  startPeers(randomBytes(32).toString('hex'));

  const all = HOSTS.map((h) => h.id);
  const others = (id: string) => all.filter((x) => x !== id);
  const converged = () =>
    all.every(
      (id) =>
        JSON.stringify(knows(id)) === JSON.stringify(others(id)) &&
        Object.values(latest.get(id)!.origins).every((n) => n === 2),
    );
  await waitFor(converged, 8000, views('convergence'));

  // Cut host-2's cable at the switch.
  ip('-n', SWITCH, 'link', 'set', HOSTS[2].port, 'down');
  await waitFor(
    () => !knows('host-0').includes('host-2') && !knows('host-1').includes('host-2') && knows('host-2').length === 0,
    TTL_MS + 2000,
    views('host-2 aged out, and it ages out the others'),
  );
  assert.deepEqual(knows('host-0'), ['host-1'], 'the hosts still connected keep each other');

  ip('-n', SWITCH, 'link', 'set', HOSTS[2].port, 'up');
  await waitFor(converged, 8000, views('reconvergence'));
});
