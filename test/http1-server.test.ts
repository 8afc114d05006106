// The API listener's own HTTP/1.1 server (agent/server/http1/server.ts) over raw loopback sockets:
// keep-alive, pipelined requests answered in order, Expect: 100-continue, HEAD, HTTP/1.0, chunked
// request bodies, streamed answers, refusals answered as OpenAI-shaped JSON then closed, its three
// timers, a client that leaves, and the drain's close calls.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { Http1Server, type Http1Limits } from '../agent/server/http1/server.ts';
import type { ApiRequest, ApiResponse } from '../agent/server/exchange.ts';
import { RequestError } from '../agent/server/request.ts';

const servers: Http1Server[] = [];
after(() => {
  for (const s of servers) {
    s.close();
    s.closeAllConnections();
  }
});

type Handler = (req: ApiRequest, res: ApiResponse) => void;

/** Echoes method, target, a header and the body as JSON, with its length. */
const echo: Handler = (req, res) => {
  req.readBody(1024).then(
    (body) => {
      const text = JSON.stringify({
        method: req.method,
        url: req.url,
        tag: req.headers.get('x-tag'),
        body: Buffer.from(body).toString(),
      });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) });
      res.end(text);
    },
    (error: RequestError) => {
      const text = JSON.stringify({ error: error.message });
      res.writeHead(error.status, { 'content-length': String(Buffer.byteLength(text)) });
      res.end(text);
    },
  );
};

async function serve(handler: Handler = echo, limits: Partial<Http1Limits> = {}): Promise<Http1Server> {
  const server = await new Http1Server(handler, limits).listen(0, '127.0.0.1');
  servers.push(server);
  return server;
}

/** A raw client: what it wrote, everything it read, and when the server closed. */
async function client(server: Http1Server): Promise<{ socket: Socket; text: () => string; closed: Promise<void> }> {
  const socket = connect(server.address().port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  let text = '';
  socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { socket, text: () => text, closed };
}

const until = async (check: () => boolean) => {
  while (!check()) await new Promise((r) => setTimeout(r, 5));
};

/** Answers in `text`, split on status lines. */
const statuses = (text: string) => [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));

test('keeps the connection and answers pipelined requests in order, one at a time', async () => {
  let open = 0;
  let most = 0;
  const server = await serve((req, res) => {
    open++;
    most = Math.max(most, open);
    // The first answer is the slowest: a server answering out of order would show it.
    const delay = req.url === '/1' ? 30 : 0;
    setTimeout(() => {
      open--;
      echo(req, res);
    }, delay);
  });
  const c = await client(server);
  c.socket.write(
    'POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\none' +
      'POST /2 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n' +
      '\r\nGET /3 HTTP/1.1\r\nHost: a\r\n\r\n',
  );
  await until(() => statuses(c.text()).length === 3);
  const bodies = [...c.text().matchAll(/\{"method[^}]*\}/g)].map(
    (m) => JSON.parse(m[0]) as { url: string; body: string },
  );
  assert.deepEqual(
    bodies.map((b) => [b.url, b.body]),
    [
      ['/1', 'one'],
      ['/2', 'two'],
      ['/3', ''],
    ],
  );
  assert.equal(most, 1, 'the next request is not parsed before this one is answered');
  assert.match(c.text(), /connection: keep-alive\r\nkeep-alive: timeout=5\r\n/);
  assert.equal(c.socket.destroyed, false);
  c.socket.destroy();
});

test('a body split across many writes, Expect: 100-continue, HEAD, HTTP/1.0 and Connection: close', async () => {
  const server = await serve();
  const a = await client(server);
  a.socket.write('POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n');
  await until(() => a.text().includes('100 Continue'));
  for (const c of 'hello') a.socket.write(c);
  await until(() => statuses(a.text()).length === 2);
  assert.deepEqual(statuses(a.text()), [100, 200]);
  assert.match(a.text(), /"body":"hello"/);

  a.socket.write('HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n');
  await until(() => statuses(a.text()).length === 3);
  // The length of the answer a GET would get, and no body.
  assert.match(a.text(), /content-length: \d+\r\n[^]*\r\n\r\n$/);

  a.socket.write('GET /c HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n');
  await a.closed;
  assert.match(a.text(), /connection: close\r\n/);

  const b = await client(server);
  b.socket.write('GET /old HTTP/1.0\r\n\r\n');
  await b.closed;
  assert.deepEqual(statuses(b.text()), [200]);
  assert.match(b.text(), /"url":"\/old"/);
});

test('streams an answer of unknown length chunked in HTTP/1.1 and up to the close in HTTP/1.0', async () => {
  const server = await serve((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: 1\n\n');
    res.write(''); // nothing: must not end the body early
    setTimeout(() => {
      res.write(Buffer.from('data: 2\n\n'));
      res.end();
    }, 10);
  });
  const a = await client(server);
  a.socket.write('POST /s HTTP/1.1\r\nHost: a\r\n\r\n');
  await until(() => a.text().endsWith('0\r\n\r\n'));
  assert.match(
    a.text(),
    /transfer-encoding: chunked\r\n[^]*\r\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n$/,
  );
  const b = await client(server);
  b.socket.write('POST /s HTTP/1.0\r\n\r\n');
  await b.closed;
  assert.match(b.text(), /connection: close\r\n[^]*\r\n\r\ndata: 1\n\ndata: 2\n\n$/);
  assert.doesNotMatch(b.text(), /transfer-encoding/);
});

test('refuses smuggling and malformed heads with an OpenAI-shaped error and closes, the handler never called', async () => {
  let called = 0;
  const server = await serve(
    (req, res) => {
      called++;
      echo(req, res);
    },
    { maxHeaderBytes: 1024, maxHeaders: 10 },
  );
  const cases: [string, number][] = [
    ['POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n', 501],
    ['POST / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n', 400],
    ['POST / HTTP/1.1\nHost: a\n\n', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nz\r\n', 400],
    [`GET / HTTP/1.1\r\nHost: a\r\nX: ${'a'.repeat(2000)}\r\n\r\n`, 431],
    [`GET / HTTP/1.1\r\nHost: a\r\n${'X: a\r\n'.repeat(11)}\r\n`, 431],
    ['GET / HTTP/2.0\r\nHost: a\r\n\r\n', 505],
    ['CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n', 501],
  ];
  for (const [bytes, status] of cases) {
    const c = await client(server);
    // A second request behind the bad one must not be answered.
    c.socket.write(`${bytes}GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n`);
    await c.closed;
    assert.deepEqual(statuses(c.text()), [status], JSON.stringify(bytes));
    const body = c.text().slice(c.text().indexOf('\r\n\r\n') + 4);
    const error = (JSON.parse(body) as { error: { message: string; type: string; code: string } }).error;
    assert.equal(error.code, 'invalid_http_request');
    assert.ok(error.message.length > 0);
    assert.match(c.text(), /connection: close\r\n/);
  }
  assert.equal(called, 0);
});

test('a body past maxBodyBytes is refused by its reader, read to its end, and the next request still served', async () => {
  const server = await serve(echo, { maxBodyBytes: 1024 });
  const c = await client(server);
  c.socket.write(`POST /big HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n`);
  for (let i = 0; i < 4; i++) c.socket.write(`200\r\n${'x'.repeat(512)}\r\n`);
  c.socket.write('0\r\n\r\nPOST /small HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nok');
  await until(() => statuses(c.text()).length === 2);
  assert.deepEqual(statuses(c.text()), [413, 200]);
  assert.match(c.text(), /"body":"ok"/);
  c.socket.destroy();
});

test('headers timeout: a head trickled byte by byte gets 408 and the connection closes', async () => {
  const server = await serve(echo, { headersTimeoutMs: 150 });
  const c = await client(server);
  const trickle = setInterval(() => c.socket.write('X'), 10);
  c.socket.write('GET / HTTP/1.1\r\nHost: a\r\nX-Slow: ');
  await c.closed;
  clearInterval(trickle);
  assert.deepEqual(statuses(c.text()), [408]);
  assert.match(c.text(), /"code":"invalid_http_request"/);
});

test('request timeout: a body that does not arrive fails its reader with 408, then the connection closes', async () => {
  const server = await serve(echo, { requestTimeoutMs: 150 });
  const c = await client(server);
  c.socket.write('POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc');
  await c.closed;
  assert.deepEqual(statuses(c.text()), [408]);
  assert.match(c.text(), /connection: close\r\n/);
});

test('keep-alive timeout: an idle connection is closed by the server', async () => {
  const server = await serve(echo, { keepAliveTimeoutMs: 100 });
  const c = await client(server);
  c.socket.write('GET / HTTP/1.1\r\nHost: a\r\n\r\n');
  await c.closed;
  assert.deepEqual(statuses(c.text()), [200]);
  assert.match(c.text(), /keep-alive: timeout=0\r\n/);
});

test('a client that leaves mid-answer closes its response unfinished; one that leaves mid-body fails the read with 499', async () => {
  const closes: boolean[] = [];
  const failures: number[] = [];
  let reading = false;
  const server = await serve((req, res) => {
    res.on('close', () => closes.push(res.writableFinished));
    if (req.url === '/body') {
      reading = true;
      return void req.readBody(1024).catch((error: RequestError) => failures.push(error.status));
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: 1\n\n');
  });
  const a = await client(server);
  a.socket.write('GET /stream HTTP/1.1\r\nHost: a\r\n\r\n');
  await until(() => a.text().includes('data: 1'));
  a.socket.end(); // a half-close counts as leaving
  await until(() => closes.length === 1);
  const b = await client(server);
  b.socket.write('POST /body HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc');
  await until(() => reading);
  b.socket.destroy();
  await until(() => failures.length === 1);
  assert.deepEqual(closes, [false, false]);
  assert.deepEqual(failures, [499]);
});

test('drain: close() answers what is open with connection: close, idle connections close at once', async () => {
  const held: ApiResponse[] = [];
  const server = await serve((_req, res) => void held.push(res));
  const idle = await client(server);
  idle.socket.write('GET / HTTP/1.1\r\nHost: a\r\n\r\n');
  const busy = await client(server);
  await until(() => held.length === 1);
  held[0].writeHead(200, { 'content-length': '2' }).end('ok');
  await until(() => statuses(idle.text()).length === 1);
  busy.socket.write('GET / HTTP/1.1\r\nHost: a\r\n\r\n');
  await until(() => held.length === 2);
  server.close();
  server.closeIdleConnections();
  await idle.closed;
  assert.equal(busy.socket.destroyed, false);
  held[1].writeHead(200, { 'content-length': '2' }).end('ok');
  await busy.closed;
  assert.match(busy.text(), /connection: close\r\n/);
});

test('an answer header that would split the head is refused before anything is written', async () => {
  const server = await serve((_req, res) => {
    assert.throws(() => res.writeHead(200, { 'x-a': 'b\r\nx-evil: 1' }), /invalid character/);
    res.writeHead(500, { 'content-length': '0' }).end();
  });
  const c = await client(server);
  c.socket.write('GET / HTTP/1.1\r\nHost: a\r\n\r\n');
  await until(() => statuses(c.text()).length === 1);
  assert.deepEqual(statuses(c.text()), [500]);
  assert.doesNotMatch(c.text(), /x-evil/);
  c.socket.destroy();
});
