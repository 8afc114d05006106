// Memory given back when the agent turns quiet: when (pure), that the GC it asks for really hands
// the heap's spare pages back on this Node, and that a running agent does it after serving requests.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { connect, type AddressInfo } from 'node:net';
import { memoryRelease, memoryReducingGc, QuietAfterBusy } from '../agent/memory/idle-release.ts';
import { dropKeptHttpParsers } from '../agent/memory/http-parsers.ts';
import { mallocTrim } from '../agent/memory/malloc-trim.ts';
import { chatBody, postJson, startStack, waitFor } from './helpers/stack.ts';

const { createServer } = process.getBuiltinModule('node:http');
const keptParsers = () =>
  (process.getBuiltinModule('_http_common') as unknown as { parsers: { list: unknown[] } }).parsers.list;

/** `n` connections at once to `port`, each sending one request and leaving once answered. */
async function connections(port: number, n: number): Promise<void> {
  await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<void>((resolve, reject) => {
          const socket = connect(port, '127.0.0.1', () =>
            socket.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'),
          );
          socket.on('data', () => {});
          socket.on('close', () => resolve());
          socket.on('error', reject);
        }),
    ),
  );
}

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

describe('dropKeptHttpParsers', () => {
  it('closes the parsers node:http kept from closed connections, and later connections are served', async () => {
    dropKeptHttpParsers();
    let open = 0;
    const held: (() => void)[] = [];
    const server = createServer((_req, res) => {
      // Every connection is open at once before any is answered: each needs a parser of its own.
      held.push(() => res.end('ok'));
      if (++open === 20) for (const answer of held.splice(0)) answer();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      await connections(port, 20);
      await waitFor(async () => keptParsers().length >= 20, 5000, 'the closed connections’ parsers kept for reuse');
      const kept = keptParsers().length;
      assert.equal(dropKeptHttpParsers(2), kept - 2, 'all but the two asked to keep');
      assert.equal(keptParsers().length, 2);
      assert.equal(dropKeptHttpParsers(), 2);
      assert.equal(keptParsers().length, 0);
      open = 19; // the next connection is answered at once
      await connections(port, 1);
      assert.equal(keptParsers().length, 1, 'a new connection got a new parser, kept again after it closed');
    } finally {
      server.close();
    }
  });
});

describe('mallocTrim', () => {
  it('calls glibc’s malloc_trim through koffi where koffi is installed, and says why not where it is not', () => {
    let installed = true;
    try {
      createRequire(import.meta.url).resolve('koffi');
    } catch {
      installed = false;
    }
    const trim = mallocTrim();
    if (
      installed &&
      process.platform === 'linux' &&
      (process.report.getReport() as { header: { glibcVersionRuntime?: string } }).header.glibcVersionRuntime
    ) {
      assert.ok('trim' in trim, JSON.stringify(trim));
      trim.trim();
    } else {
      assert.ok('unavailable' in trim);
      if (!installed) assert.match(trim.unavailable, /koffi could not be loaded/);
    }
  });

  it('leaves the idle release working without it, and says so once', () => {
    const notes: string[] = [];
    const release = memoryRelease((m) => notes.push(m));
    release();
    release();
    assert.equal(notes.length, 'trim' in mallocTrim() ? 0 : 1, notes.join('; '));
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
