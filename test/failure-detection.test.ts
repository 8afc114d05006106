// The pure parts of failure detection: pod ejection's backoff and readmission, and the SWIM-style
// detector's direct and indirect probes, news and refutation, driven on a frozen clock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Ejections } from '../agent/pool/ejection.ts';
import { FailureDetector, type ProbeOut } from '../agent/gossip/probe.ts';

test('an ejected pod is out until a probe readmits it, for a backoff that doubles with repeats', () => {
  const e = new Ejections({ baseMs: 1000, maxMs: 4000, forgetAfterMs: 60_000 });
  assert.equal(e.eject('p', 0), 1000);
  assert.equal(e.eject('p', 10), 990, 'requests failing together count once');
  assert.ok(e.isOut('p'));
  assert.deepEqual(e.due(999), []);
  assert.deepEqual(e.due(1000), ['p']);
  assert.equal(e.probed('p', false, 1000), false);
  assert.deepEqual(e.state('p'), { count: 2, until: 3000 }, 'a failed probe: out twice as long');
  assert.equal(e.probed('p', true, 3000), true);
  assert.equal(e.isOut('p'), false);
  assert.equal(e.eject('p', 3500), 4000, 'failing again soon after: longer still');
  e.probed('p', true, 7500);
  assert.equal(e.eject('p', 7500 + 60_000), 1000, 'a long healthy spell starts over');
});

/** Agents wired to each other in memory; `dead` ones drop everything sent to them. */
function cluster(names: string[]) {
  const detectors = new Map(
    names.map((n) => [n, new FailureDetector(n, { periodMs: 100, directTimeoutMs: 50, indirectTimeoutMs: 150 })]),
  );
  for (const d of detectors.values()) d.setMembers(names);
  const dead = new Set<string>();
  let now = 0;
  let seed = 1;
  const rand = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
  const deliver = (from: string, outs: ProbeOut[]) => {
    const queue = outs.map((o) => ({ from, ...o }));
    while (queue.length) {
      const { from: sender, to, message } = queue.shift()!;
      if (dead.has(to) || dead.has(sender)) continue;
      const step = detectors.get(to)!.receive(sender, message, now);
      queue.push(...step.out.map((o) => ({ from: to, ...o })));
    }
  };
  return {
    detectors,
    dead,
    step(ms: number) {
      for (let t = 0; t < ms; t += 10) {
        now += 10;
        for (const [name, d] of detectors) if (!dead.has(name)) deliver(name, d.tick(now, rand).out);
        // News rides on gossip rounds too: each live agent passes it to one other.
        for (const [name, d] of detectors) {
          if (dead.has(name)) continue;
          const notices = d.news();
          const to = names[Math.floor(rand() * names.length)];
          if (notices.length && to !== name)
            deliver(name, [{ to, message: { kind: 'news', seq: 0, target: '', notices } }]);
        }
      }
    },
    get now() {
      return now;
    },
  };
}

test('a dead agent is found down by periodic probes and every live agent hears it', () => {
  const c = cluster(['a', 'b', 'c', 'd', 'e']);
  c.step(500);
  for (const d of c.detectors.values()) assert.deepEqual([...d.outAgents()], [], 'nobody down while all answer');
  c.dead.add('e');
  c.step(1500);
  for (const [name, d] of c.detectors) if (name !== 'e') assert.ok(d.isOut('e'), `${name} knows e is down`);
  assert.ok(
    [...c.detectors.values()].some((d) => d.counters.indirect > 0),
    'indirect probes were tried first',
  );
});

test('a suspected agent is out at once and back when it answers', () => {
  const c = cluster(['a', 'b', 'c']);
  const a = c.detectors.get('a')!;
  const step = a.suspect('b', c.now);
  assert.ok(step.changed && a.isOut('b'));
  const ack = c.detectors.get('b')!.receive('a', step.out[0].message, c.now).out[0];
  assert.equal(ack.message.kind, 'ack');
  assert.ok(a.receive('b', ack.message, c.now).changed);
  assert.equal(a.isOut('b'), false);
});

test('an agent declared down by mistake refutes it, and the refutation wins everywhere', () => {
  const c = cluster(['a', 'b', 'c']);
  const a = c.detectors.get('a')!;
  // b drops a's probes for a while (a one-way loss), so a declares it down.
  c.dead.add('b');
  a.suspect('b', c.now);
  c.step(300);
  assert.ok(a.isOut('b'));
  c.dead.delete('b');
  c.step(1000);
  for (const [name, d] of c.detectors) if (name !== 'b') assert.equal(d.isOut('b'), false, `${name} takes b back`);
  assert.ok(c.detectors.get('b')!.counters.refuted > 0);
});

test('an ack counts by its probe, not by the address it came from (an agent listed by name)', () => {
  const a = new FailureDetector('10.0.0.1:7946', { periodMs: 100, directTimeoutMs: 50, indirectTimeoutMs: 150 });
  a.setMembers(['agent-b.example:7946']);
  const b = new FailureDetector('0.0.0.0:7946');
  b.setMembers(['10.0.0.1:7946']);
  let now = 0;
  const ping = a.tick(now, () => 0).out[0];
  assert.equal(ping.to, 'agent-b.example:7946');
  const ack = b.receive('10.0.0.1:7946', ping.message, now).out[0];
  a.receive('10.0.0.2:7946', ack.message, now); // b's datagrams come from its IP
  for (now = 10; now < 100; now += 10) a.tick(now, () => 0.99); // past the direct timeout, before the next probe
  assert.equal(a.isOut('agent-b.example:7946'), false);
  assert.equal(a.counters.indirect, 0);
});
