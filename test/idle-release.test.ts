// Memory given back when the agent turns quiet: when (pure), that the GC it asks for really hands
// the heap's spare pages back on this Node, and that a running agent does it after serving requests.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { memoryReducingGc, QuietAfterBusy } from '../agent/memory/idle-release.ts';
import { chatBody, postJson, startStack, waitFor } from './helpers/stack.ts';

describe('QuietAfterBusy', () => {
  it('releases once, quietMs after the last request closed, and not before any request', () => {
    const quiet = new QuietAfterBusy(1000);
    assert.equal(quiet.observe(0, 0, 0), false);
    assert.equal(quiet.observe(5000, 0, 0), false, 'nothing served yet: nothing to give back');
    assert.equal(quiet.observe(6000, 3, 1), false, 'requests came');
    assert.equal(quiet.observe(6500, 3, 1), false);
    assert.equal(quiet.observe(9000, 3, 1), false, 'a request still open (a long stream) is not quiet');
    assert.equal(quiet.observe(9500, 3, 0), false, 'quiet for 500 ms only');
    assert.equal(quiet.observe(10_500, 3, 0), true);
    assert.equal(quiet.observe(20_000, 3, 0), false, 'once per quiet period');
    assert.equal(quiet.observe(21_000, 4, 0), false, 'a new request');
    assert.equal(quiet.observe(21_900, 4, 0), false);
    assert.equal(quiet.observe(22_000, 4, 0), true);
  });
});

describe('memoryReducingGc', () => {
  it("hands back the heap's freed pages without putting gc() on the global object", () => {
    const release = memoryReducingGc();
    assert.equal(typeof (globalThis as { gc?: unknown }).gc, 'undefined');
    let garbage: unknown[][] = [];
    for (let i = 0; i < 200; i++) {
      garbage.push(Array.from({ length: 20_000 }, (_, k) => ({ k })));
      if (garbage.length > 50) garbage.shift();
    }
    const grown = process.memoryUsage().heapTotal;
    garbage = [];
    release();
    const after = process.memoryUsage().heapTotal;
    assert.ok(garbage.length === 0 && after < grown / 4, `heap total ${grown} → ${after} bytes`);
  });
});

describe('an agent that turned quiet', () => {
  it('runs one memory-reducing GC after serving requests (kinference_memory_releases_total)', async () => {
    const stack = await startStack({ config: { limits: { releaseMemoryAfterIdle: '100ms' } } });
    try {
      const releases = async () =>
        Number(
          /^kinference_memory_releases_total (\d+)/m.exec(await (await fetch(`${stack.admin}/metrics`)).text())?.[1],
        );
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(await releases(), 0, 'no request served yet');
      for (let i = 0; i < 3; i++)
        assert.equal((await postJson(`${stack.api}/v1/chat/completions`, chatBody())).status, 200);
      await waitFor(async () => (await releases()) === 1, 10_000, 'one release after the requests');
    } finally {
      await stack.close();
    }
  });
});
