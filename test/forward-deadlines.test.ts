// The pod exchanges' headers deadlines (agent/forward/deadlines.ts): one timer for every deadline
// of one length. Each deadline fires once, never before its time, in the order set; a cleared one
// never fires, wherever it sits in the list; deadlines added from a callback are kept. A sentinel
// set last says when every earlier deadline has had its turn (they fall due in order).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Deadlines } from '../agent/forward/deadlines.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test('fires each deadline once, not before its time, in order; cleared ones (head, middle, tail) never', async () => {
  const fired: { name: string; late: number }[] = [];
  const setAt = new Map<string, number>();
  let sentinel!: () => void;
  const done = new Promise<void>((resolve) => (sentinel = resolve));
  const list = new Deadlines<string>(30, (name) => {
    fired.push({ name, late: performance.now() - setAt.get(name)! - 30 });
    if (name === 'z') sentinel();
  });
  const add = (name: string) => {
    setAt.set(name, performance.now());
    return list.add(name);
  };
  const a = add('a');
  await sleep(5);
  add('b');
  const c = add('c');
  await sleep(5);
  add('d');
  const e = add('e');
  a.clear(); // the head, whose deadline the timer was armed for
  c.clear(); // the middle
  e.clear(); // the tail
  e.clear(); // twice is harmless
  add('z');
  await done;
  assert.deepEqual(
    fired.map((f) => f.name),
    ['b', 'd', 'z'],
  );
  // Never early (timers have millisecond granularity, hence the 1 ms).
  for (const f of fired) assert.ok(f.late >= -1, `${f.name} fired ${-f.late} ms early`);
});

test('a deadline cleared after it fired is harmless; one added from a callback fires; an emptied list arms again', async () => {
  const fired: string[] = [];
  let wake!: () => void;
  let next = new Promise<void>((resolve) => (wake = resolve));
  const list: Deadlines<string> = new Deadlines<string>(10, (name) => {
    fired.push(name);
    if (name === 'first') list.add('from-callback');
    else wake();
  });
  const first = list.add('first');
  await next;
  first.clear();
  assert.deepEqual(fired, ['first', 'from-callback']);
  next = new Promise<void>((resolve) => (wake = resolve));
  list.add('later');
  await next;
  assert.deepEqual(fired, ['first', 'from-callback', 'later']);
});
