// The scraper's own HTTP/1.1 client (agent/telemetry/scrape-connection.ts): the pure response
// reader fed bytes cut at every position, and the connection against real node:http servers (and
// raw sockets where a server must misbehave) serving the real vLLM, TGI and SGLang pages.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import {
  parseHead,
  ResponseReader,
  ScrapeConnection,
  type ResponseSink,
} from '../agent/telemetry/scrape-connection.ts';
import { mulberry32 } from '../shared/sim/random.ts';

interface Collected extends ResponseSink {
  status: number;
  encoding: string;
  body: () => Buffer;
  outcome: Promise<{ ok: true } | { ok: false; error: string }>;
}

function collector(): Collected {
  const chunks: Buffer[] = [];
  let settle!: (o: { ok: true } | { ok: false; error: string }) => void;
  const outcome = new Promise<{ ok: true } | { ok: false; error: string }>((resolve) => (settle = resolve));
  const sink: Collected = {
    status: 0,
    encoding: '',
    body: () => Buffer.concat(chunks),
    outcome,
    head(status, encoding) {
      sink.status = status;
      sink.encoding = encoding;
    },
    data: (chunk) => chunks.push(Buffer.from(chunk)), // copied: the connection reuses its buffer
    end: () => settle({ ok: true }),
    error: (error) => settle({ ok: false, error }),
  };
  return sink;
}

/** Feeds `bytes` to a reader in the given pieces; what the sink got and how the response ended. */
function readInPieces(bytes: Buffer, cuts: readonly number[], maxHeaderBytes?: number) {
  const reader = new ResponseReader(maxHeaderBytes);
  const sink = collector();
  reader.begin(sink);
  let outcome: string = 'more';
  const bounds = [0, ...cuts, bytes.length];
  for (let k = 0; k + 1 < bounds.length && outcome === 'more'; k++)
    outcome = reader.read(bytes, bounds[k], bounds[k + 1]);
  return { outcome, sink, reader };
}

const chunkedResponse = (body: Buffer, chunk = 26) => {
  const parts = ['HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nTransfer-Encoding: chunked\r\n\r\n'];
  for (let at = 0; at < body.length; at += chunk) {
    const piece = body.subarray(at, at + chunk);
    parts.push(`${piece.length.toString(16)}${at === 0 ? ';name="ext"' : ''}\r\n${piece.toString('latin1')}\r\n`);
  }
  parts.push('0\r\nX-Trailer: yes\r\n\r\n');
  return Buffer.from(parts.join(''), 'latin1');
};

test('reader: chunked and Content-Length responses cut at every byte position read the same', () => {
  const body = Buffer.from('vllm:num_requests_waiting{model_name="m"} 4.0\nvllm:num_requests_running 9\n');
  const responses = [
    chunkedResponse(body),
    chunkedResponse(body, 1),
    Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n`), body]),
  ];
  for (const bytes of responses) {
    for (let cut = 1; cut < bytes.length; cut++) {
      for (const cuts of [[cut], [cut, Math.min(bytes.length - 1, cut + 3)]]) {
        const { outcome, sink, reader } = readInPieces(bytes, cuts);
        assert.equal(outcome, 'ended', `cut at ${cuts}: ${reader.error}`);
        assert.equal(sink.status, 200);
        assert.deepEqual(sink.body(), body, `cut at ${cuts}`);
        assert.equal(reader.extra, false);
        assert.equal(reader.keepAlive, true);
      }
    }
    const bytewise = readInPieces(
      bytes,
      Array.from({ length: bytes.length - 1 }, (_, i) => i + 1),
    );
    assert.equal(bytewise.outcome, 'ended');
    assert.deepEqual(bytewise.sink.body(), body);
  }
});

test('reader: framing, status and size errors fail the response with the reason', () => {
  const cases: [string, RegExp][] = [
    ['HTTP/2 200 OK\r\n\r\n', /not an HTTP\/1.x status line/],
    ['SSH-2.0-OpenSSH\r\n\r\n', /not an HTTP\/1.x status line/],
    ['HTTP/1.1 200 OK\r\nbad header\r\n\r\n', /malformed header line/],
    ['HTTP/1.1 200 OK\r\n folded: x\r\n\r\n', /malformed header line/],
    ['HTTP/1.1 200 OK\r\ncontent-length: 12x\r\n\r\n', /invalid Content-Length/],
    ['HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd', /conflicting Content-Length/],
    ['HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n', /unsupported Transfer-Encoding/],
    ['HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n', /unsupported Transfer-Encoding/],
    ['HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n', /invalid chunk size/],
    ['HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\r\n', /invalid chunk size/],
    ['HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\nabc', /invalid chunk size/],
    ['HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcX', /chunk data not followed by CRLF/],
    ['HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n123456789\r\n', /chunk size too large/],
    ['HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\n', /not ended by CRLF/],
    ['HTTP/1.1 101 Switching Protocols\r\n\r\n', /protocol switch/],
    [`HTTP/1.1 200 OK\r\nx: ${'a'.repeat(300)}\r\n\r\n`, /response head larger than 256 bytes/],
    [`HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;${'e'.repeat(300)}\r\n`, /chunk-size line longer/],
    [`HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\nt: ${'v'.repeat(300)}\r\n\r\n`, /trailers larger/],
  ];
  for (const [text, reason] of cases) {
    const bytes = Buffer.from(text, 'latin1');
    for (const cuts of [[], [Math.floor(bytes.length / 2)]]) {
      const { outcome, reader } = readInPieces(bytes, cuts, 256);
      assert.equal(outcome, 'failed', JSON.stringify(text.slice(0, 60)));
      assert.match(reader.error, reason, JSON.stringify(text.slice(0, 60)));
    }
  }
});

test('reader: interim 1xx answers, empty bodies, Connection: close, HTTP/1.0, bytes past the end, a body until close', () => {
  const interim = readInPieces(
    Buffer.from('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok'),
    [],
  );
  assert.equal(interim.outcome, 'ended');
  assert.equal(interim.sink.body().toString(), 'ok');

  for (const head of ['HTTP/1.1 204 No Content\r\n\r\n', 'HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n']) {
    const empty = readInPieces(Buffer.from(head), []);
    assert.equal(empty.outcome, 'ended');
    assert.equal(empty.sink.body().length, 0);
  }

  const close = readInPieces(
    Buffer.from('HTTP/1.1 503 Busy\r\nConnection: close\r\ncontent-length: 4\r\n\r\nbusy'),
    [],
  );
  assert.equal(close.sink.status, 503);
  assert.equal(close.reader.keepAlive, false);
  assert.equal(readInPieces(Buffer.from('HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\nx'), []).reader.keepAlive, false);
  const http10 = readInPieces(
    Buffer.from('HTTP/1.0 200 OK\r\nConnection: keep-alive\r\ncontent-length: 1\r\n\r\nx'),
    [],
  );
  assert.equal(http10.reader.keepAlive, true);
  // Both framings: chunked is read, and the connection is not reused.
  const both = readInPieces(
    Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 99\r\ntransfer-encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n'),
    [],
  );
  assert.equal(both.outcome, 'ended');
  assert.equal(both.reader.keepAlive, false);

  const extra = readInPieces(Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nxHTTP/1.1 200 OK'), []);
  assert.equal(extra.outcome, 'ended');
  assert.equal(extra.reader.extra, true);

  const untilClose = readInPieces(Buffer.from('HTTP/1.1 200 OK\r\n\r\nall of it'), []);
  assert.equal(untilClose.outcome, 'more');
  assert.equal(untilClose.reader.eof(), 'ended');
  assert.equal(untilClose.sink.body().toString(), 'all of it');
  assert.equal(untilClose.reader.keepAlive, false);

  const cut = readInPieces(Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort'), []);
  assert.equal(cut.outcome, 'more');
  assert.equal(cut.reader.eof(), 'failed');
  assert.match(cut.reader.error, /closed before the response ended/);
});

/**
 * The head reader as first written (split into lines, a regex per line): the reference the
 * in-place `parseHead` must agree with on every head.
 */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/; // a field name (RFC 9110 5.6.2), as the first reader checked it

function parseHeadByLines(text: string): ReturnType<typeof parseHead> {
  const lines = text.split('\r\n');
  const status = /^HTTP\/1\.([01]) (\d{3})(?: |$)/.exec(lines[0]);
  if (status === null) return { error: `not an HTTP/1.x status line: ${JSON.stringify(lines[0].slice(0, 40))}` };
  const code = Number(status[2]);
  let connection = '';
  let transferEncoding: string | undefined;
  let contentLength: string | undefined;
  let contentEncoding = 'identity';
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i];
    const colon = line.indexOf(':');
    if (colon <= 0 || !TOKEN.test(line.slice(0, colon)))
      return { error: `malformed header line: ${JSON.stringify(line.slice(0, 40))}` };
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === 'content-length') {
      for (const part of value.split(',')) {
        const length = part.trim();
        if (!/^\d{1,15}$/.test(length))
          return { error: `invalid Content-Length ${JSON.stringify(value.slice(0, 40))}` };
        if (contentLength !== undefined && Number(contentLength) !== Number(length))
          return { error: 'conflicting Content-Length headers' };
        contentLength = length;
      }
    } else if (name === 'transfer-encoding') {
      transferEncoding = transferEncoding === undefined ? value : `${transferEncoding}, ${value}`;
    } else if (name === 'connection') {
      connection += `,${value.toLowerCase()}`;
    } else if (name === 'content-encoding') {
      contentEncoding = value.toLowerCase() || 'identity';
    }
  }
  const tokens = connection.split(',').map((t) => t.trim());
  let keepAlive = status[1] === '1' ? !tokens.includes('close') : tokens.includes('keep-alive');
  let body: { length: number } | 'chunked' | 'until-close' | 'none' | { error: string };
  if ((code >= 100 && code < 200) || code === 204 || code === 304) body = 'none';
  else if (transferEncoding !== undefined) {
    const codings = transferEncoding.toLowerCase().split(',');
    if (codings[codings.length - 1].trim() !== 'chunked')
      body = { error: `unsupported Transfer-Encoding ${JSON.stringify(transferEncoding.slice(0, 40))}` };
    else if (codings.length > 1) body = { error: `unsupported Transfer-Encoding ${JSON.stringify(transferEncoding)}` };
    else body = 'chunked';
    if (contentLength !== undefined) keepAlive = false;
  } else if (contentLength !== undefined) body = { length: Number(contentLength) };
  else {
    body = 'until-close';
    keepAlive = false;
  }
  return { status: code, keepAlive, contentEncoding, body };
}

test("head: read in place, every head (real servers' and 20,000 seeded mutations of them) reads as the line-split reader did", () => {
  const heads = [
    // uvicorn (vLLM, SGLang), node:http, axum (TGI), and framing and keep-alive variants
    'HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 13:00:00 GMT\r\nserver: uvicorn\r\ncontent-length: 44612\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8',
    'HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: 3412\r\nDate: Wed, 02 Dec 2026 13:00:00 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5',
    'HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ntransfer-encoding: chunked\r\ndate: Wed, 02 Dec 2026 13:00:00 GMT',
    'HTTP/1.0 200 OK\r\nConnection: Keep-Alive, TE\r\nContent-Encoding: GZIP\r\ncontent-length: 10, 10',
    'HTTP/1.1 204 No Content\r\nconnection: close',
    'HTTP/1.1 404 Not Found\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 4',
    'HTTP/1.1 200',
    'HTTP/1.1 100 Continue',
  ];
  const alphabet = [
    ':',
    ' ',
    '\t',
    '\r',
    '\n',
    '\r\n',
    ',',
    'a',
    'Z',
    '0',
    '9',
    '-',
    '\u00e9',
    '\u00a0',
    '"',
    'close',
    'chunked',
    '1',
  ];
  const rand = mulberry32(0x5c4a9e);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
  const texts = [...heads];
  for (let n = 0; n < 20_000; n++) {
    let text = pick(heads);
    for (let edits = 1 + Math.floor(rand() * 3); edits > 0; edits--) {
      const at = Math.floor(rand() * (text.length + 1));
      const op = rand();
      if (op < 0.4) text = text.slice(0, at) + pick(alphabet) + text.slice(at);
      else if (op < 0.7) text = text.slice(0, at) + text.slice(at + 1 + Math.floor(rand() * 3));
      else text = text.slice(0, at) + pick(alphabet) + text.slice(at + 1);
    }
    texts.push(text);
  }
  let errors = 0;
  for (const text of texts) {
    const expected = parseHeadByLines(text);
    assert.deepEqual(parseHead(text), expected, JSON.stringify(text));
    if ('error' in expected) errors++;
  }
  // Both verdicts are exercised.
  assert.ok(errors > 2_000 && errors < texts.length - 2_000, `${errors} of ${texts.length} refused`);
});

const PAGES = new URL('./fixtures/model-server-metrics/', import.meta.url);
const pages = readdirSync(PAGES)
  .filter((f) => f.endsWith('.txt'))
  .map((f) => ({ file: f, bytes: readFileSync(new URL(f, PAGES)) }));

async function listen<T extends Server | NetServer>(server: T): Promise<{ server: T; address: string }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, address: `127.0.0.1:${(server.address() as AddressInfo).port}` };
}

function closeServer(server: Server | NetServer): Promise<void> {
  (server as Server).closeAllConnections?.();
  return new Promise((resolve) => server.close(() => resolve()));
}

const connectionTo = (address: string, options: { idleReuseMs?: number } = {}) =>
  new ScrapeConnection({ address, path: '/metrics', headers: { accept: 'text/plain' }, ...options });

async function get(connection: ScrapeConnection): Promise<Collected> {
  const sink = collector();
  connection.get(sink);
  await sink.outcome;
  return sink;
}

test('connection: real vLLM, TGI and SGLang pages from node:http, by length and chunked, on one kept-alive connection', async (t) => {
  let connections = 0;
  const { server, address } = await listen(
    createServer((req, res) => {
      const page = pages.find((p) => req.url === `/metrics` && p.file === req.headers['x-page']) ?? pages[0];
      if (req.headers['x-framing'] === 'chunked') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        for (let at = 0; at < page.bytes.length; at += 1000) res.write(page.bytes.subarray(at, at + 1000));
        res.end();
      } else {
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': page.bytes.length }).end(page.bytes);
      }
    }),
  );
  server.on('connection', () => connections++);
  t.after(() => closeServer(server));
  for (const framing of ['length', 'chunked']) {
    for (const page of pages) {
      const connection = new ScrapeConnection({
        address,
        path: '/metrics',
        headers: { 'x-page': page.file, 'x-framing': framing },
      });
      for (let i = 0; i < 2; i++) {
        const sink = await get(connection);
        assert.deepEqual(await sink.outcome, { ok: true });
        assert.equal(sink.status, 200);
        assert.equal(sink.encoding, 'identity');
        assert.ok(sink.body().equals(page.bytes), `${page.file} ${framing}`);
      }
      await connection.close();
    }
  }
  assert.equal(connections, pages.length * 2, 'one connection per ScrapeConnection, reused for its second request');
});

test('connection: an error status is read to its end and the connection reused; Connection: close is honoured', async (t) => {
  let connections = 0;
  let n = 0;
  const { server, address } = await listen(
    createServer((_req, res) => {
      n++;
      if (n === 1) res.writeHead(404, { 'content-type': 'text/plain' }).end('not here');
      else if (n === 2) res.writeHead(200, { connection: 'close', 'content-length': 2 }).end('ok');
      else res.writeHead(200, { 'content-length': 3 }).end('new');
    }),
  );
  server.on('connection', () => connections++);
  t.after(() => closeServer(server));
  const connection = connectionTo(address);
  const notFound = await get(connection);
  assert.equal(notFound.status, 404);
  assert.equal(notFound.body().toString(), 'not here');
  const closing = await get(connection);
  assert.equal(closing.body().toString(), 'ok');
  assert.equal(connection.connected, false, 'closed after the server said close');
  const fresh = await get(connection);
  assert.equal(fresh.body().toString(), 'new');
  assert.equal(connections, 2);
  await connection.close();
});

test('connection: a refused connect, a close mid-body and a server that never answers are failures, and the next get reconnects', async (t) => {
  const refused = await listen(createNetServer());
  await closeServer(refused.server);
  const dead = await (await get(connectionTo(refused.address))).outcome;
  assert.equal(dead.ok, false);
  assert.match((dead as { error: string }).error, /ECONNREFUSED/);

  // A raw server: the first connection is cut mid-body, the second never answers, the third is served.
  let accepted = 0;
  const sockets: Socket[] = [];
  const { server, address } = await listen(
    createNetServer((socket) => {
      sockets.push(socket);
      const index = accepted++;
      socket.once('data', () => {
        if (index === 0) socket.end('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial');
        else if (index === 2) socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
      });
    }),
  );
  t.after(async () => {
    for (const s of sockets) s.destroy();
    await closeServer(server);
  });
  const connection = connectionTo(address);
  const cut = await get(connection);
  assert.deepEqual(await cut.outcome, { ok: false, error: 'connection closed before the response ended' });

  const hung = collector();
  connection.get(hung);
  await new Promise((resolve) => setTimeout(resolve, 50));
  connection.abort(hung); // what the scraper's timeout does
  assert.equal(connection.connected, false);
  const served = await get(connection);
  assert.deepEqual(await served.outcome, { ok: true });
  assert.equal(served.body().toString(), 'ok');
  const settled = await Promise.race([hung.outcome, Promise.resolve('no callback')]);
  assert.equal(settled, 'no callback', 'an aborted response gets no callback');
  await connection.close();
});

test('connection: bytes nobody asked for drop the connection; an idle one past idleReuseMs is replaced', async (t) => {
  let accepted = 0;
  const sockets: Socket[] = [];
  const { server, address } = await listen(
    createNetServer((socket) => {
      sockets.push(socket);
      const index = accepted++;
      socket.on('data', () => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
        // The first connection then sends an unasked-for second answer.
        if (index === 0) setTimeout(() => socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nno'), 20);
      });
    }),
  );
  t.after(async () => {
    for (const s of sockets) s.destroy();
    await closeServer(server);
  });
  const connection = connectionTo(address);
  assert.equal((await get(connection)).body().toString(), 'ok');
  const deadline = Date.now() + 5000;
  while (connection.connected && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(connection.connected, false, 'dropped when unasked-for bytes came');
  assert.equal((await get(connection)).body().toString(), 'ok');
  assert.equal(accepted, 2);
  await connection.close();

  const everyTime = connectionTo(address, { idleReuseMs: 0 });
  for (let i = 0; i < 3; i++) assert.equal((await get(everyTime)).body().toString(), 'ok');
  assert.equal(accepted, 5, 'idleReuseMs 0: a new connection per request');
  await everyTime.close();
});
