// The pod client (agent/forward/pod-client.ts, undici's Agent and dispatch) against raw TCP servers on
// loopback that answer byte for byte as a test says: both framings, answers split anywhere,
// kept-alive reuse and its limits, a kept-alive connection the server closed, malformed answers,
// the body's idle timeout, backpressure, and the per-pod connection bound.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { PodClient } from '../agent/forward/pod-client.ts';

const servers: Server[] = [];
const sockets: Socket[] = [];
after(() => {
  for (const s of sockets) s.destroy();
  for (const s of servers) s.close();
});

/** A TCP server calling `onRequest` once per request head + body (Content-Length) it reads. */
async function rawServer(
  onRequest: (socket: Socket, request: { head: string; body: string; index: number }) => void,
): Promise<{ address: string; connections: number; requests: number }> {
  const stats = { address: '', connections: 0, requests: 0 };
  const server = createServer((socket) => {
    stats.connections++;
    sockets.push(socket);
    let pending = Buffer.alloc(0);
    socket.on('error', () => {});
    socket.on('data', (data) => {
      pending = Buffer.concat([pending, data]);
      for (;;) {
        const end = pending.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = pending.subarray(0, end).toString('latin1');
        const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
        if (pending.length < end + 4 + length) return;
        const body = pending.subarray(end + 4, end + 4 + length).toString();
        pending = pending.subarray(end + 4 + length);
        onRequest(socket, { head, body, index: stats.requests++ });
      }
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  stats.address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return stats;
}

interface Result {
  status?: number;
  contentType?: string;
  body: string;
  error?: string;
  chunks: number;
}

function post(client: PodClient, address: string, body = '{}', idleMs = 5000): Promise<Result> {
  return new Promise((resolve) => {
    const result: Result = { body: '', chunks: 0 };
    client.post(
      address,
      '/v1/chat/completions',
      { 'content-type': 'application/json', 'x-request-id': 'r-1' },
      Buffer.from(body),
      {
        head: (status, contentType) => Object.assign(result, { status, contentType }),
        data: (chunk) => {
          result.body += chunk.toString();
          result.chunks++;
          return true;
        },
        end: () => resolve(result),
        error: (error) => resolve({ ...result, error: error.message }),
      },
      idleMs,
    );
  });
}

test('sends the head, headers and body; reads a Content-Length answer and reuses the connection', async () => {
  const seen: string[] = [];
  const pod = await rawServer((socket, { head, body }) => {
    seen.push(`${head}\n${body}`);
    socket.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}');
  });
  const client = new PodClient({ maxConnectionsPerPod: 4 });
  for (let i = 0; i < 3; i++) {
    // undici frees the connection on the turn after an answer ends.
    if (i > 0) await new Promise(setImmediate);
    const r = await post(client, pod.address, '{"model":"m"}');
    assert.deepEqual(r, { status: 200, contentType: 'application/json', body: '{"ok":true}', chunks: 1 });
  }
  assert.equal(pod.connections, 1, 'one kept-alive connection for requests one after another');
  assert.match(seen[0], /^POST \/v1\/chat\/completions HTTP\/1\.1\r\n/);
  assert.match(seen[0], new RegExp(`\r\nhost: ${pod.address}\r\n`));
  assert.match(seen[0], /\r\ncontent-length: 13(\r\n|\n)/);
  assert.match(seen[0], /\r\nx-request-id: r-1(\r\n|\n)/);
  assert.match(seen[0], /\n\{"model":"m"\}$/);
  await client.close();
});

test('reads a chunked answer split at every byte, framing removed, trailers skipped', async () => {
  const answer =
    'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n' +
    '7\r\ndata: a\r\n' +
    'A;ext=1\r\n\ndata: b\n\n\r\n' +
    '0\r\nx-trailer: 1\r\n\r\n';
  const pod = await rawServer((socket) => {
    const bytes = Buffer.from(answer);
    let i = 0;
    const next = () => {
      if (i >= bytes.length) return;
      socket.write(bytes.subarray(i, ++i));
      setImmediate(next);
    };
    next();
  });
  const client = new PodClient({ maxConnectionsPerPod: 1 });
  const first = await post(client, pod.address);
  assert.equal(first.error, undefined);
  await new Promise(setImmediate);
  assert.equal(first.status, 200);
  assert.equal(first.contentType, 'text/event-stream');
  assert.equal(first.body, 'data: a\ndata: b\n\n');
  const second = await post(client, pod.address);
  assert.equal(second.body, first.body);
  assert.equal(pod.connections, 1, 'reused after a chunked answer');
  await client.close();
});

test('an answer read until close; Connection: close and HTTP/1.0 are not reused', async () => {
  const answers = [
    'HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nhi',
    'HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nhi',
    'HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil close',
  ];
  const pod = await rawServer((socket, { index }) => {
    socket.write(answers[index]);
    if (index === 2) socket.end();
  });
  const client = new PodClient({ maxConnectionsPerPod: 1 });
  assert.equal((await post(client, pod.address)).body, 'hi');
  assert.equal((await post(client, pod.address)).body, 'hi');
  const last = await post(client, pod.address);
  assert.equal(last.error, undefined);
  assert.equal(last.body, 'until close');
  assert.equal(pod.connections, 3);
  await client.close();
});

test("a kept-alive connection the pod closed fails that exchange (the caller's to retry elsewhere); the next gets a fresh one", async () => {
  const pod = await rawServer((socket, { index }) => {
    if (index === 1) return void socket.destroy(); // the second request finds the connection closing
    socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
  });
  const client = new PodClient({ maxConnectionsPerPod: 2 });
  assert.equal((await post(client, pod.address)).body, 'ok');
  await new Promise(setImmediate);
  const failed = await post(client, pod.address);
  assert.match(failed.error ?? '', /closed|reset|ECONNRESET/i);
  assert.equal(failed.status, undefined, 'nothing of an answer was read');
  assert.equal((await post(client, pod.address)).body, 'ok');
  assert.equal(pod.connections, 2);
  await client.close();
});

test('a refused connection, a malformed answer and unasked-for bytes fail the exchange and drop the connection', async () => {
  const client = new PodClient({ maxConnectionsPerPod: 2 });
  const closed = await rawServer(() => {});
  const address = closed.address;
  servers.pop()!.close();
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.match((await post(client, address)).error ?? '', /ECONNREFUSED/);

  const answers = [
    'HTTP/1.1 200 OK\r\nbad header line\r\n\r\n',
    'HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nhi',
    'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n',
    'SSH-2.0-OpenSSH\r\n\r\n',
  ];
  const bad = await rawServer((socket, { index }) => socket.write(answers[index]));
  for (const answer of answers) {
    const r = await post(client, bad.address);
    // A head may have been read (a chunked body that then breaks), never a body byte.
    assert.ok(r.error, answer);
    assert.equal(r.body, '', answer);
  }
  assert.equal(bad.connections, answers.length, 'each failure dropped its connection');

  const extra = await rawServer((socket) => socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA'));
  assert.equal((await post(client, extra.address)).body, 'ok');
  assert.equal((await post(client, extra.address)).body, 'ok');
  assert.equal(extra.connections, 2, 'bytes after the answer: the connection is not reused');
  await client.close();
});

test('a body silent for longer than idleMs fails; a head split across reads is read', async () => {
  const pod = await rawServer((socket, { index }) => {
    if (index === 0) {
      socket.write('HTTP/1.1 200 OK\r\ncont');
      setTimeout(() => socket.write('ent-length: 5\r\n\r\nab'), 20);
      setTimeout(() => socket.write('cde'), 40);
    } else socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab');
  });
  const client = new PodClient({ maxConnectionsPerPod: 1 });
  const whole = await post(client, pod.address, '{}', 1000);
  assert.equal(whole.body, 'abcde');
  await new Promise(setImmediate);
  const started = performance.now();
  const stalled = await post(client, pod.address, '{}', 200);
  assert.match(stalled.error ?? '', /body timeout/i);
  assert.equal(stalled.body, 'ab');
  assert.ok(performance.now() - started >= 150);
  await client.close();
});

test('at maxConnectionsPerPod further requests wait for a free connection, in order; abort leaves the queue', async () => {
  const held: Socket[] = [];
  const pod = await rawServer((socket) => held.push(socket));
  const client = new PodClient({ maxConnectionsPerPod: 2 });
  const results = [post(client, pod.address), post(client, pod.address), post(client, pod.address)];
  const gone = client.post(
    pod.address,
    '/x',
    {},
    Buffer.from('{}'),
    { head() {}, data: () => true, end: () => assert.fail('aborted'), error: () => assert.fail('aborted') },
    5000,
  );
  gone.abort();
  while (held.length < 2) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(pod.connections, 2);
  for (const s of held.splice(0)) s.write('HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n1');
  while (held.length < 1) await new Promise((resolve) => setTimeout(resolve, 10));
  held[0].write('HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n3');
  assert.deepEqual(
    (await Promise.all(results)).map((r) => r.body),
    ['1', '1', '3'],
  );
  assert.equal(pod.requests, 3, 'the aborted request never went out');
  await client.close();
});

test('a header that could split the request is refused before anything is sent', async () => {
  const pod = await rawServer(() => assert.fail('nothing should arrive'));
  const client = new PodClient({ maxConnectionsPerPod: 1 });
  const error = await new Promise<string>((resolve) =>
    client.post(
      pod.address,
      '/v1/x',
      { authorization: 'Bearer key\r\nx-injected: 1' },
      Buffer.from('{}'),
      { head() {}, data: () => true, end: () => resolve('ended'), error: (e) => resolve(e.message) },
      5000,
    ),
  );
  assert.match(error, /invalid authorization header/);
  assert.equal(pod.connections, 0);
  await client.close();
});
