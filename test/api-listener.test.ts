// The API listener (agent/server/listener/listener.ts: node:http with the agent's settings) over raw
// loopback sockets: keep-alive and pipelined requests answered in order, Expect: 100-continue,
// HEAD, HTTP/1.0, chunked request bodies, streamed answers, every refusal an OpenAI-shaped error
// with its status and `connection: close`, its timers, a client that leaves, the drain's close
// calls, and a request with more than a hundred header fields served.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type AddressInfo, type Socket } from 'node:net';
import type { Server } from 'node:http';
import { listenApi, type ListenerLimits } from '../agent/server/listener/listener.ts';
import type { ApiRequest, ApiResponse } from '../agent/server/exchange.ts';
import type { RequestError } from '../agent/server/bodies/request.ts';

const servers: Server[] = [];
after(() => {
  for (const s of servers) {
    s.close();
    s.closeAllConnections();
  }
});

type Handler = (req: ApiRequest, res: ApiResponse) => void;

/** Echoes method, target, a header, the number of header fields and the body as JSON. */
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

async function serve(handler: Handler = echo, limits: Partial<ListenerLimits> = {}): Promise<Server> {
  const server = await listenApi(handler, limits, 0, '127.0.0.1');
  servers.push(server);
  return server;
}

/** A raw client: everything it read, and when the server closed. */
async function client(server: Server): Promise<{ socket: Socket; text: () => string; closed: Promise<void> }> {
  const socket = connect((server.address() as AddressInfo).port, '127.0.0.1');
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

test('keeps the connection and answers pipelined requests in order', async () => {
  const server = await serve((req, res) => {
    // The first answer is the slowest: a server answering out of order would show it.
    setTimeout(() => echo(req, res), req.url === '/1' ? 30 : 0);
  });
  const c = await client(server);
  c.socket.write(
    'POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\none' +
      'POST /2 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n' +
      'GET /3 HTTP/1.1\r\nHost: a\r\n\r\n',
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
  assert.match(c.text(), /connection: keep-alive\r\nkeep-alive: timeout=5\r\n/i);
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
  assert.match(a.text(), /content-length: \d+\r\n[^]*\r\n\r\n$/i);

  a.socket.write('GET /c HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n');
  await a.closed;
  assert.match(a.text(), /connection: close\r\n/i);

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
    /transfer-encoding: chunked\r\n(?:[^\r]*\r\n)*\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n$/i,
  );
  const b = await client(server);
  b.socket.write('POST /s HTTP/1.0\r\n\r\n');
  await b.closed;
  assert.match(b.text(), /connection: close\r\n(?:[^\r]*\r\n)*\r\ndata: 1\n\ndata: 2\n\n$/i);
  assert.doesNotMatch(b.text(), /transfer-encoding/i);
});

test('refuses smuggling, malformed heads and body framing with an OpenAI-shaped error and closes; nothing behind it is served', async () => {
  const bodies: string[] = [];
  const server = await serve(
    (req, res) => {
      // A head llhttp accepts reaches the handler; a body it then refuses is never read whole.
      req.readBody(1024).then(
        (body) => bodies.push(`${req.url} ${Buffer.from(body).toString()}`),
        () => {},
      );
      echo(req, res);
    },
    { maxHeaderBytes: 1024, maxHeaders: 10, maxTargetBytes: 256 },
  );
  const cases: [string, number][] = [
    ['POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\xa0\r\n\r\n0\r\n\r\n', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\xa0\r\n\r\nabc', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n', 400],
    ['POST / HTTP/1.1\nHost: a\n\n', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nz\r\n', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2 zz\r\nab\r\n0\r\n\r\n', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2;\r\nab\r\n0\r\n\r\n', 400],
    ['POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nnot a field\r\n\r\n', 400],
    [`GET / HTTP/1.1\r\nHost: a\r\nX: ${'a'.repeat(2000)}\r\n\r\n`, 431],
    [`GET / HTTP/1.1\r\nHost: a\r\n${'X: a\r\n'.repeat(11)}\r\n`, 431],
    [`GET /${'a'.repeat(300)} HTTP/1.1\r\nHost: a\r\n\r\n`, 414],
    ['GET / HTTP/1.1\r\n\r\n', 400],
    ['GET / HTTP/2.0\r\nHost: a\r\n\r\n', 505],
    ['CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n', 501],
  ];
  for (const [bytes, status] of cases) {
    const c = await client(server);
    // A second request behind the bad one must not be answered.
    c.socket.write(Buffer.from(`${bytes}GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n`, 'latin1'));
    await c.closed;
    assert.deepEqual(statuses(c.text()), [status], JSON.stringify(bytes));
    const body = c.text().slice(c.text().indexOf('\r\n\r\n') + 4);
    const error = (JSON.parse(body) as { error: { message: string; type: string; code: string } }).error;
    assert.equal(error.code, 'invalid_http_request');
    assert.ok(error.message.length > 0);
    assert.match(c.text(), /connection: close\r\n/i);
  }
  assert.deepEqual(bodies, []);
});

test('a request with 103 header fields is served (the default allows node:http`s 2,000)', async () => {
  const server = await serve(echo);
  const c = await client(server);
  let fields = '';
  for (let i = 0; i < 102; i++) fields += `X-F${i}: ${i}\r\n`;
  c.socket.write(`GET /many HTTP/1.1\r\nHost: a\r\n${fields}\r\n`);
  await until(() => statuses(c.text()).length === 1);
  assert.deepEqual(statuses(c.text()), [200]);
  c.socket.destroy();
});

test('a body past the reader`s limit gets 413 and the next request is still served', async () => {
  const server = await serve(echo);
  const c = await client(server);
  c.socket.write(`POST /big HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n`);
  for (let i = 0; i < 4; i++) c.socket.write(`200\r\n${'x'.repeat(512)}\r\n`);
  c.socket.write('0\r\n\r\nPOST /small HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nok');
  await until(() => statuses(c.text()).length === 2);
  assert.deepEqual(statuses(c.text()), [413, 200]);
  assert.match(c.text(), /"body":"ok"/);
  c.socket.destroy();
});

test('headers timeout: a head trickled byte by byte gets an OpenAI-shaped 408 and the connection closes', async () => {
  const server = await serve(echo, { headersTimeoutMs: 150, requestTimeoutMs: 200 });
  const c = await client(server);
  const trickle = setInterval(() => c.socket.write('X'), 10);
  c.socket.write('GET / HTTP/1.1\r\nHost: a\r\nX-Slow: ');
  await c.closed;
  clearInterval(trickle);
  assert.deepEqual(statuses(c.text()), [408]);
  assert.match(c.text(), /"code":"invalid_http_request"/);
});

test('request timeout: a body that does not arrive gets 408, then the connection closes', async () => {
  const server = await serve(echo, { headersTimeoutMs: 100, requestTimeoutMs: 150 });
  const c = await client(server);
  c.socket.write('POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc');
  await c.closed;
  assert.deepEqual(statuses(c.text()), [408]);
  assert.match(c.text(), /connection: close\r\n/i);
});

test('keep-alive timeout and requests per connection close a connection', async () => {
  const idle = await client(await serve(echo, { keepAliveTimeoutMs: 100 }));
  idle.socket.write('GET / HTTP/1.1\r\nHost: a\r\n\r\n');
  await idle.closed;
  assert.deepEqual(statuses(idle.text()), [200]);

  const counted = await client(await serve(echo, { maxRequestsPerSocket: 2 }));
  counted.socket.write('GET /1 HTTP/1.1\r\nHost: a\r\n\r\n');
  await until(() => statuses(counted.text()).length === 1);
  counted.socket.write('GET /2 HTTP/1.1\r\nHost: a\r\n\r\n');
  await counted.closed;
  assert.deepEqual(statuses(counted.text()), [200, 200]);
  assert.match(counted.text(), /connection: close\r\n/i);
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
  a.socket.destroy();
  await until(() => closes.length === 1);
  const b = await client(server);
  b.socket.write('POST /body HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc');
  await until(() => reading);
  b.socket.destroy();
  await until(() => failures.length === 1);
  assert.deepEqual(closes, [false, false]);
  assert.deepEqual(failures, [499]);
});

test('drain: close() closes idle connections at once and lets open answers finish', async () => {
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
  await until(() => statuses(busy.text()).length === 1);
  // A request after the close is answered, and its connection closed after it.
  busy.socket.write('GET / HTTP/1.1\r\nHost: a\r\n\r\n');
  await until(() => held.length === 3);
  held[2].writeHead(200, { 'content-length': '2' }).end('ok');
  await busy.closed;
  assert.match(busy.text(), /connection: close\r\n/i);
});

test('an answer header that would split the head is refused before anything is written', async () => {
  const server = await serve((_req, res) => {
    assert.throws(() => res.writeHead(200, { 'x-a': 'b\r\nx-evil: 1' }), /Invalid character/);
    res.writeHead(500, { 'content-length': '0' }).end();
  });
  const c = await client(server);
  c.socket.write('GET / HTTP/1.1\r\nHost: a\r\n\r\n');
  await until(() => statuses(c.text()).length === 1);
  assert.deepEqual(statuses(c.text()), [500]);
  assert.doesNotMatch(c.text(), /x-evil/);
  c.socket.destroy();
});
