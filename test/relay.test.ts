// The pod relay on real loopback sockets: a pod (node:http) streaming more than any socket buffer
// holds, the production pod client (sendToPod) and relay (relayTo) in an agent-shaped listener,
// and a raw TCP client that stops reading. The relay must stop taking the pod's bytes when the
// client's socket is full (the pod's writes block), then deliver everything once the client reads.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { createPodDispatcher, sendToPod } from '../agent/forward/pod.ts';
import { relayTo } from '../agent/forward/relay.ts';

const CHUNK = Buffer.from(`data: ${'x'.repeat(64 * 1024 - 8)}\n\n`);
const CHUNKS = 1024; // 64 MiB: well past loopback's socket buffers on both hops
const pod = { written: 0, blockedSince: 0, finished: false };
let podServer: Server;
let agentServer: Server;
const dispatcher = createPodDispatcher(4);

const listen = (server: Server) =>
  new Promise<string>((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve(`127.0.0.1:${(server.address() as AddressInfo).port}`)),
  );

before(async () => {
  podServer = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    let sent = 0;
    const more = () => {
      while (sent < CHUNKS) {
        sent++;
        pod.written += CHUNK.length;
        if (!res.write(CHUNK)) {
          pod.blockedSince = performance.now();
          return void res.once('drain', () => ((pod.blockedSince = 0), more()));
        }
      }
      pod.finished = true;
      res.end();
    };
    more();
  });
  const podAddress = await listen(podServer);
  agentServer = createServer((req, res) => {
    const left = new AbortController();
    res.once('close', () => left.abort());
    void (async () => {
      const timeouts = { connectMs: 5000, responseMs: 5000, idleMs: 30_000 };
      const attempt = await sendToPod(
        dispatcher,
        podAddress,
        '/v1/chat/completions',
        Buffer.from('{}'),
        left.signal,
        timeouts,
        {
          wholeAnswer: false,
        },
      );
      assert.ok(attempt.ok);
      res.writeHead(200, { 'content-type': attempt.contentType });
      await relayTo(res, { first: attempt.first, source: attempt.rest, eventStream: true });
    })();
  });
  await listen(agentServer);
});

after(async () => {
  agentServer.closeAllConnections();
  podServer.closeAllConnections();
  agentServer.close();
  podServer.close();
  await dispatcher.close();
});

test('a client that stops reading stops the pod (backpressure), then gets every byte once it reads', async () => {
  const { port } = agentServer.address() as AddressInfo;
  const client = connect(port, '127.0.0.1');
  let received = 0;
  let reading = false;
  const ended = new Promise<void>((resolve) => client.once('end', resolve));
  client.on('data', (data: Buffer) => {
    received += data.length;
    if (!reading) client.pause(); // read one piece, then nothing until told to read below
  });
  client.write('POST /v1/chat/completions HTTP/1.1\r\nhost: agent\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}');
  // Either the pod blocks (its writes wait for 'drain' for a while) or it finishes: an agent that
  // buffered the stream instead of pausing would let it finish.
  for (;;) {
    if (pod.finished) break;
    if (pod.blockedSince > 0 && performance.now() - pod.blockedSince > 500) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.equal(pod.finished, false, `the pod wrote all ${pod.written} bytes while the client read none`);
  assert.ok(pod.written < (CHUNKS * CHUNK.length) / 2, `${pod.written} bytes left the pod`);
  reading = true;
  client.resume();
  await ended;
  assert.ok(pod.finished);
  assert.ok(received > CHUNKS * CHUNK.length, `${received} bytes received`); // the body plus chunked framing
});

test("the headers deadline covers the pod's headers, not its first token; past it the attempt fails, retryable", async () => {
  const slow = createServer((req, res) => {
    req.resume();
    if (req.url === '/headers-then-token') {
      res.writeHead(200, { 'content-type': 'text/event-stream' }).flushHeaders();
      setTimeout(() => res.end('data: [DONE]\n\n'), 1600);
    } else setTimeout(() => res.writeHead(200).end('{}'), 1600);
  });
  const address = await listen(slow);
  const timeouts = { connectMs: 1000, responseMs: 1000, idleMs: 5000 };
  const send = (path: string) =>
    sendToPod(dispatcher, address, path, Buffer.from('{}'), new AbortController().signal, timeouts, {
      wholeAnswer: false,
    });
  try {
    const streamed = await send('/headers-then-token');
    assert.ok(streamed.ok, streamed.ok ? '' : streamed.error);
    assert.equal(Buffer.from(streamed.first!).toString(), 'data: [DONE]\n\n');
    const silent = await send('/silent');
    assert.equal(silent.ok, false);
    assert.ok(!silent.ok && silent.retryable);
    assert.match(!silent.ok ? silent.error : '', /no response headers within 1000 ms/);
  } finally {
    slow.closeAllConnections();
    slow.close();
  }
});
