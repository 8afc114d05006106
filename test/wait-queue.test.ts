import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WaitQueue, type Waiter } from '../agent/admission/wait-queue.ts';
import type { Priority } from '../agent/budget/limits.ts';

const FAR = 1e12;

function drain<T>(q: WaitQueue<T>, n = Infinity, fits?: (w: Waiter<T>) => boolean): Waiter<T>[] {
  const out: Waiter<T>[] = [];
  while (out.length < n) {
    const w = q.take(fits);
    if (!w) break;
    out.push(w);
  }
  return out;
}

test('two tenants waiting for one pod with 10:1 traffic: the smaller is served every other turn, not after the bigger', () => {
  const q = new WaitQueue<string>({ maxWaiting: 1000 });
  // Arrivals: ten of a, then one of b, repeated ten times (110 waiters).
  for (let round = 0; round < 10; round++) {
    for (let i = 0; i < 10; i++) q.enqueue(`a${round * 10 + i}`, { tenant: 'a', priority: 'standard', deadline: FAR });
    q.enqueue(`b${round}`, { tenant: 'b', priority: 'standard', deadline: FAR });
  }
  const served = drain(q).map((w) => w.item);
  // b's k-th request is served by turn 2k + 2 (FIFO would serve it at turn 11k + 11).
  for (let k = 0; k < 10; k++)
    assert.ok(
      served.indexOf(`b${k}`) <= 2 * k + 2,
      `b${k} at ${served.indexOf(`b${k}`)}: ${served.slice(0, 24).join(' ')}`,
    );
  // Within each tenant, first come first served.
  assert.deepEqual(
    served.filter((s) => s.startsWith('a')),
    Array.from({ length: 100 }, (_, i) => `a${i}`),
  );
  assert.deepEqual(
    served.filter((s) => s.startsWith('b')),
    Array.from({ length: 10 }, (_, i) => `b${i}`),
  );
});

test('continuous 10:1 arrivals at a rate the pod cannot keep up with: the small tenant waits a bounded number of turns', () => {
  const q = new WaitQueue<number>({ maxWaiting: 10_000 });
  let turn = 0;
  const waitedTurns: number[] = [];
  const enqueuedAt = new Map<Waiter<number>, number>();
  for (let tick = 0; tick < 200; tick++) {
    for (let i = 0; i < 10; i++) q.enqueue(tick, { tenant: 'big', priority: 'standard', deadline: FAR });
    const small = q.enqueue(tick, { tenant: 'small', priority: 'standard', deadline: FAR });
    if (small.admitted) enqueuedAt.set(small.waiter, turn);
    // Five pods free per tick: less than the eleven arriving.
    for (let i = 0; i < 5; i++) {
      const w = q.take()!;
      turn++;
      if (w.tenant === 'small') waitedTurns.push(turn - enqueuedAt.get(w)!);
    }
  }
  assert.equal(waitedTurns.length, 200, 'every small request was served despite the backlog of big ones');
  assert.ok(Math.max(...waitedTurns) <= 2, `waited at most ${Math.max(...waitedTurns)} turns`);
  assert.ok(q.depth().byTenant.get('big')! > 1000, 'the big tenant is the one that waits');
});

test('weights give a tenant a proportional share', () => {
  const q = new WaitQueue<string>({ maxWaiting: 1000, weight: (t) => (t === 'gold' ? 3 : 1) });
  for (let i = 0; i < 30; i++) {
    q.enqueue('gold', { tenant: 'gold', priority: 'standard', deadline: FAR });
    q.enqueue('basic', { tenant: 'basic', priority: 'standard', deadline: FAR });
  }
  const first = drain(q, 20).map((w) => w.item);
  assert.equal(first.filter((t) => t === 'gold').length, 15);
});

test('a critical request overtakes sheddable and standard ones; sheddable go last', () => {
  const q = new WaitQueue<string>({ maxWaiting: 100 });
  for (let i = 0; i < 5; i++) q.enqueue(`shed${i}`, { tenant: 'batch', priority: 'sheddable', deadline: FAR });
  q.enqueue('std', { tenant: 'web', priority: 'standard', deadline: FAR });
  q.enqueue('crit', { tenant: 'batch', priority: 'critical', deadline: FAR });
  assert.deepEqual(
    drain(q).map((w) => w.item),
    ['crit', 'std', 'shed0', 'shed1', 'shed2', 'shed3', 'shed4'],
  );
});

test('waiting full: sheddable are refused first; a newcomer displaces the newest waiter of a lower class, from the heaviest tenant', () => {
  const q = new WaitQueue<string>({ maxWaiting: 4 });
  const add = (item: string, tenant: string, priority: Priority) =>
    q.enqueue(item, { tenant, priority, deadline: FAR });
  add('s1', 'a', 'sheddable');
  add('s2', 'a', 'sheddable');
  add('s3', 'b', 'sheddable');
  add('x1', 'b', 'standard');
  assert.deepEqual(add('s4', 'a', 'sheddable'), { admitted: false }, 'the tenant most over its share gets no more');
  const std = add('x2', 'c', 'standard');
  assert.ok(std.admitted);
  assert.equal(std.shed?.item, 's2', 'the newest sheddable of the tenant with most sheddable waiters');
  const crit = add('c1', 'c', 'critical');
  assert.ok(crit.admitted && crit.shed?.item === 's1');
  add('c2', 'd', 'critical'); // sheds s3
  assert.equal(add('x3', 'e', 'standard').admitted, false, 'nothing below standard is left to shed');
  assert.deepEqual(q.depth().byPriority, { critical: 2, standard: 2, sheddable: 0 });
  assert.equal(q.size, 4);
});

test('waiting full within one class: a tenant under its share displaces the newest waiter of the tenant most over it', () => {
  const q = new WaitQueue<string>({ maxWaiting: 6 });
  const add = (item: string, tenant: string) => q.enqueue(item, { tenant, priority: 'standard', deadline: FAR });
  const shedBy = (item: string, tenant: string) => {
    const e = add(item, tenant);
    return e.admitted ? e.shed?.item : 'refused';
  };
  for (let i = 0; i < 6; i++) add(`flood${i}`, 'flood');
  assert.deepEqual(add('flood6', 'flood'), { admitted: false });
  const light = add('light0', 'light');
  assert.ok(light.admitted && light.shed?.item === 'flood5', 'the newest of the flood gives way');
  assert.equal(shedBy('light1', 'light'), 'flood4');
  assert.equal(shedBy('other0', 'other'), 'flood3');
  // Now flood 3, light 2, other 1: light would hold as many as flood keeps, so no more moves.
  assert.deepEqual(add('light2', 'light'), { admitted: false });
  assert.equal(shedBy('other1', 'other'), 'flood2');
  assert.deepEqual([...q.depth().byTenant].sort(), [
    ['flood', 2],
    ['light', 2],
    ['other', 2],
  ]);
  assert.deepEqual(
    drain(q).map((w) => w.item),
    ['flood0', 'light0', 'other0', 'flood1', 'light1', 'other1'],
    'and the line is served fairly',
  );
});

test('the head gets the freed pod among those it fits; deadlines expire waiters; a client that leaves is removed', () => {
  const q = new WaitQueue<{ model: string }>({ maxWaiting: 10 });
  q.enqueue({ model: 'llama' }, { tenant: 'a', priority: 'standard', deadline: 100 });
  const gone = q.enqueue({ model: 'llama' }, { tenant: 'a', priority: 'standard', deadline: 500 });
  q.enqueue({ model: 'mistral' }, { tenant: 'b', priority: 'standard', deadline: 300 });
  q.enqueue({ model: 'llama' }, { tenant: 'b', priority: 'standard', deadline: 400 });
  assert.equal(q.nextDeadline(), 100);
  // A mistral pod frees: only b's mistral waiter can use it.
  assert.equal(q.take((w) => w.item.model === 'mistral')?.deadline, 300);
  assert.ok(gone.admitted);
  assert.equal(q.remove(gone.waiter), true);
  assert.equal(q.remove(gone.waiter), false, 'removing twice is harmless');
  assert.deepEqual(
    q.expire(100).map((w) => w.deadline),
    [100],
  );
  assert.equal(q.nextDeadline(), 400);
  assert.equal(q.take()?.tenant, 'b');
  assert.equal(q.take(), undefined);
  assert.equal(q.size, 0);
});
