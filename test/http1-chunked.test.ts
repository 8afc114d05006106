// The one chunked-body reader (shared/http1-chunked.ts), alone and through the three parts that use
// it: request bodies on the API listener (BodyFraming), metrics pages (the scrape connection's
// ResponseReader) and pod answers (the pod client, against a raw TCP server). Every part must
// refuse the same malformed framings, so a pod's answer is held to the rules a client's body is.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { ChunkedDecoder } from '../shared/http1-chunked.ts';
import { BodyFraming } from '../agent/server/http1/body.ts';
import { ResponseReader } from '../agent/telemetry/scrape-connection.ts';
import { PodClient } from '../agent/forward/pod-client.ts';

const MAX_LINE = 64;

/** Feeds `bytes` to a decoder in pieces of `step`; the body and what follows it, or the refusal. */
function decode(bytes: string, step: number): { body: string; rest: string } | { refused: string } | { open: true } {
  const decoder = new ChunkedDecoder(MAX_LINE);
  decoder.reset();
  const buf = Buffer.from(bytes, 'latin1');
  const segments: number[] = [];
  let body = '';
  for (let at = 0; at < buf.length; at += step) {
    segments.length = 0;
    const next = decoder.read(buf, at, Math.min(buf.length, at + step), segments);
    for (let s = 0; s < segments.length; s += 2) body += buf.toString('latin1', segments[s], segments[s + 1]);
    if (typeof next === 'string') return { refused: next };
    if (decoder.ended) return { body, rest: buf.toString('latin1', next) };
  }
  return { open: true };
}

test('decodes chunks split anywhere, skips extensions and trailers, and stops at the body end', () => {
  const bytes = '4\r\nWiki\r\n5;name="x y"\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nTrailer: t\r\n\r\nNEXT';
  for (const step of [1, 2, 3, 5, 7, 1000])
    assert.deepEqual(decode(bytes, step), { body: 'Wikipedia in\r\n\r\nchunks.', rest: 'NEXT' }, `step ${step}`);
  assert.deepEqual(decode('0\r\n\r\n', 1), { body: '', rest: '' });
  assert.deepEqual(decode('A\r\n0123456789\r\n0\r\n\r\n', 4), { body: '0123456789', rest: '' });
  assert.deepEqual(decode('3\r\nab', 2), { open: true });
});

test('a decoder is reused for the next body after reset', () => {
  const decoder = new ChunkedDecoder(MAX_LINE);
  for (const text of ['2\r\nok\r\n0\r\n\r\n', '1\r\nx\r\n0\r\n\r\n']) {
    decoder.reset();
    const segments: number[] = [];
    const buf = Buffer.from(text);
    assert.equal(decoder.read(buf, 0, buf.length, segments), buf.length);
    assert.equal(decoder.ended, true);
    assert.equal(segments.length, 2);
  }
});

/** Malformed framings every reader refuses, with what the refusal says. */
const REFUSED: [name: string, bytes: string, reason: RegExp][] = [
  ['no size', '\r\nabc\r\n0\r\n\r\n', /invalid chunk size/],
  ['non-hex size', 'g\r\nabc\r\n0\r\n\r\n', /invalid chunk size/],
  ['signed size', '+3\r\nabc\r\n0\r\n\r\n', /invalid chunk size/],
  ['size past 8 hex digits', '100000000\r\n', /chunk size too large/],
  ['bare LF after the size', '3\nabc\r\n0\r\n\r\n', /invalid chunk size/],
  ['bare LF in an extension', '3;a\nabc\r\n0\r\n\r\n', /invalid character in a chunk extension/],
  ['control character in an extension', '3;a\x01\r\nabc\r\n0\r\n\r\n', /invalid character in a chunk extension/],
  ['data longer than its size', '3\r\nabcd\r\n0\r\n\r\n', /chunk data not followed by CRLF/],
  ['data not followed by CRLF', '3\r\nabc\n0\r\n\r\n', /chunk data not followed by CRLF/],
  ['bare LF ending the body', '0\r\n\n', /chunked body not ended by CRLF/],
  ['bare LF ending a trailer', '0\r\nT: t\n\r\n', /invalid character in a trailer field/],
  ['control character in a trailer', '0\r\nT: \x7f\r\n\r\n', /invalid character in a trailer field/],
  ['folded trailer', '0\r\n folded\r\n\r\n', /malformed trailer section/],
  ['extension past maxLineBytes', `3;${'x'.repeat(80)}\r\nabc\r\n0\r\n\r\n`, /chunk-size line longer than 64 bytes/],
  ['trailers past maxLineBytes', `0\r\nT: ${'x'.repeat(80)}\r\n\r\n`, /trailers larger than 64 bytes/],
];

test('the decoder refuses malformed framing, read whole or byte by byte', () => {
  for (const [name, bytes, reason] of REFUSED)
    for (const step of [1, 1000]) {
      const result = decode(bytes, step);
      assert.ok('refused' in result, `${name} (step ${step}) was read as ${JSON.stringify(result)}`);
      assert.match(result.refused, reason, name);
    }
});

test('request bodies and metrics pages refuse the same framings', () => {
  for (const [name, bytes, reason] of REFUSED) {
    const buf = Buffer.from(bytes, 'latin1');
    const request = new BodyFraming('chunked', MAX_LINE).read(buf, 0, buf.length);
    assert.equal(typeof request, 'string', `request body: ${name}`);
    assert.match(request as string, reason, `request body: ${name}`);

    const page = new ResponseReader(MAX_LINE);
    page.begin({ head() {}, data() {}, end() {}, error() {} });
    const head = Buffer.from('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n', 'latin1');
    assert.equal(page.read(Buffer.concat([head, buf]), 0, head.length + buf.length), 'failed', `page: ${name}`);
    assert.match(page.error, reason, `page: ${name}`);
  }
});

const servers: Server[] = [];
const sockets: Socket[] = [];
after(() => {
  for (const s of sockets) s.destroy();
  for (const s of servers) s.close();
});

test('pod answers are refused for the same framings, and the connection dropped', async () => {
  // The pod client's line limit is its head limit (maxHeaderBytes), covered in its own test.
  const cases = REFUSED.filter(([name]) => !name.includes('maxLineBytes'));
  let next = 0;
  let connections = 0;
  const server = createServer((socket) => {
    connections++;
    sockets.push(socket);
    socket.on('error', () => {});
    socket.on('data', (data) => {
      if (!data.includes('\r\n\r\n')) return;
      const [, bytes] = cases[next++];
      socket.write(`HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n${bytes}`, 'latin1');
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  const client = new PodClient({ maxConnectionsPerPod: 1, maxHeaderBytes: MAX_LINE * 4 });
  for (const [name, , reason] of cases) {
    const error = await new Promise<string>((resolve) =>
      client.post(
        address,
        '/v1/chat/completions',
        { 'content-type': 'application/json' },
        Buffer.from('{}'),
        {
          head: () => {},
          data: () => true,
          end: () => resolve('ended'),
          error: (e) => resolve(e.message),
        },
        5000,
      ),
    );
    assert.match(error, reason, `pod answer: ${name}`);
  }
  assert.equal(connections, cases.length, 'each refusal dropped its connection');
  await client.close();
});
