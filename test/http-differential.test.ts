// A differential test of the API listener's HTTP framing: the same bytes go to the agent's
// listener (agent/server/listener/listener.ts) and to a plain node:http server, in one write and byte by
// byte, and both must frame them the same way: the same requests (method, target, body) reach the
// handler, in the same order, or both refuse. Cases are smuggling shapes, obfuscated framing
// headers, chunk-size and trailer grammar, and pipelining. Where the listener is deliberately
// stricter than node:http (an HTTP version other than 1.x), the case says so and the listener must
// have served nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type AddressInfo } from 'node:net';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { listenApi } from '../agent/server/listener/listener.ts';

const { createServer } = process.getBuiltinModule('node:http');

const H = 'Host: a\r\n';
const post = (fields: string, body: string) => `POST /p HTTP/1.1\r\n${H}${fields}\r\n${body}`;
const CHUNKED = 'Transfer-Encoding: chunked\r\n';
const NEXT = `GET /next HTTP/1.1\r\n${H}\r\n`;

/** [name, bytes, the listener refuses where node:http serves (deliberately stricter)] */
const CASES: [string, string, boolean?][] = [
  ['plain Content-Length', post('Content-Length: 3\r\n', 'abc') + NEXT],
  ['plain chunked', post(CHUNKED, '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['CL then TE', post(`Content-Length: 4\r\n${CHUNKED}`, '0\r\n\r\n') + NEXT],
  ['TE then CL', post(`${CHUNKED}Content-Length: 4\r\n`, '0\r\n\r\n') + NEXT],
  ['two different CLs', post('Content-Length: 3\r\nContent-Length: 4\r\n', 'abcd') + NEXT],
  ['two equal CLs', post('Content-Length: 3\r\nContent-Length: 3\r\n', 'abc') + NEXT],
  ['CL list', post('Content-Length: 3, 3\r\n', 'abc') + NEXT],
  ['CL with a plus', post('Content-Length: +3\r\n', 'abc') + NEXT],
  ['CL in hex', post('Content-Length: 0x3\r\n', 'abc') + NEXT],
  ['CL with a leading zero', post('Content-Length: 03\r\n', 'abc') + NEXT],
  ['CL then NBSP', post('Content-Length: 3\xa0\r\n', 'abc') + NEXT],
  ['CL negative', post('Content-Length: -1\r\n', 'abc') + NEXT],
  ['CL overflowing', post('Content-Length: 99999999999999999999\r\n', 'abc') + NEXT],
  ['TE chunked then NBSP', post('Transfer-Encoding: chunked\xa0\r\n', '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['TE upper case', post('Transfer-Encoding: CHUNKED\r\n', '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['TE xchunked', post('Transfer-Encoding: xchunked\r\n', '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['TE chunked, identity', post('Transfer-Encoding: chunked, identity\r\n', '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['TE identity, chunked', post('Transfer-Encoding: identity, chunked\r\n', '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['TE twice', post(`${CHUNKED}Transfer-Encoding: identity\r\n`, '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['TE with a tab', post('Transfer-Encoding:\tchunked\r\n', '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['space before the colon', post('Transfer-Encoding : chunked\r\n', '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['TE folded', post('Transfer-Encoding:\r\n chunked\r\n', '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['TE with a vertical tab', post('Transfer-Encoding:\x0bchunked\r\n', '3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['NUL in a field value', post('X: a\0b\r\nContent-Length: 3\r\n', 'abc') + NEXT],
  ['bare CR in a field value', post('X: a\rb\r\nContent-Length: 3\r\n', 'abc') + NEXT],
  ['bare LF line ends', `POST /p HTTP/1.1\nHost: a\nContent-Length: 3\n\nabc${NEXT}`],
  ['field name with a space', post('X Y: 1\r\nContent-Length: 3\r\n', 'abc') + NEXT],
  ['chunk size with spaces and junk', post(CHUNKED, '3 zz\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['chunk size then a space', post(CHUNKED, '3 \r\nabc\r\n0\r\n\r\n') + NEXT],
  ['chunk size 51 0', post(CHUNKED, '51 0\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['empty chunk extension', post(CHUNKED, '3;\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['chunk extension', post(CHUNKED, '3;name=value\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['quoted chunk extension', post(CHUNKED, '3;name="v;a"\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['chunk size in 0x', post(CHUNKED, '0x3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['negative chunk size', post(CHUNKED, '-3\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['chunk size overflowing', post(CHUNKED, 'ffffffffffffffffff\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['chunk data too long', post(CHUNKED, '2\r\nabc\r\n0\r\n\r\n') + NEXT],
  ['chunk without its CRLF', post(CHUNKED, '3\r\nabc0\r\n\r\n') + NEXT],
  ['a trailer field', post(CHUNKED, '3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n') + NEXT],
  ['a trailer that is not a field', post(CHUNKED, '3\r\nabc\r\n0\r\nnot a field\r\n\r\n') + NEXT],
  ['last chunk with an extension', post(CHUNKED, '3\r\nabc\r\n0;x=1\r\n\r\n') + NEXT],
  ['GET with a body', `GET /g HTTP/1.1\r\n${H}Content-Length: 3\r\n\r\nabc${NEXT}`],
  ['pipelined three', `GET /1 HTTP/1.1\r\n${H}\r\nGET /2 HTTP/1.1\r\n${H}\r\n${NEXT}`],
  ['HTTP/1.0 with a body', `POST /p HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc`],
  ['HTTP/1.0 chunked', `POST /p HTTP/1.0\r\n${CHUNKED}\r\n3\r\nabc\r\n0\r\n\r\n`],
  ['HTTP/2.0 request line', `GET / HTTP/2.0\r\n${H}\r\n`, true],
  ['absolute-form target', `GET http://a/x HTTP/1.1\r\n${H}\r\n${NEXT}`],
  ['target with a space', `GET /a b HTTP/1.1\r\n${H}\r\n${NEXT}`],
];

/** What the handler saw, in order: method, target and the whole body of each request served. */
type Seen = string[];

function nodeHandler(seen: Seen) {
  return (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push(`${req.method} ${req.url} ${JSON.stringify(Buffer.concat(chunks).toString('latin1'))}`);
      res.end('ok');
    });
    req.on('error', () => {});
  };
}

async function servers(): Promise<{ agent: Server; plain: Server; seen: { agent: Seen; plain: Seen } }> {
  const seen = { agent: [] as Seen, plain: [] as Seen };
  const agent = await listenApi(
    (req, res) => {
      req.readBody(1 << 20).then(
        (body) => {
          seen.agent.push(`${req.method} ${req.url} ${JSON.stringify(Buffer.from(body).toString('latin1'))}`);
          res.end('ok');
        },
        () => {},
      );
    },
    {},
    0,
    '127.0.0.1',
  );
  const plain = createServer(nodeHandler(seen.plain));
  await new Promise<void>((resolve) => plain.listen(0, '127.0.0.1', resolve));
  return { agent, plain, seen };
}

/** Sends `bytes` (whole, or one byte per write) and waits until the server closes or stays quiet. */
async function send(server: Server, bytes: Buffer, split: boolean): Promise<void> {
  const socket = connect((server.address() as AddressInfo).port, '127.0.0.1');
  socket.on('error', () => {});
  await new Promise((resolve) => socket.once('connect', resolve));
  const quiet = { since: 0 };
  socket.on('data', () => (quiet.since = performance.now()));
  if (!split) socket.write(bytes);
  else
    for (let i = 0; i < bytes.length && !socket.destroyed; i++) {
      socket.write(bytes.subarray(i, i + 1));
      await new Promise((r) => setImmediate(r));
    }
  quiet.since = performance.now();
  while (!socket.destroyed && performance.now() - quiet.since < 150) await new Promise((r) => setTimeout(r, 20));
  socket.destroy();
}

for (const split of [false, true]) {
  test(`the listener frames requests as node:http does (${split ? 'one byte per write' : 'one write'})`, async () => {
    const disagreements: string[] = [];
    await Promise.all(
      CASES.map(async ([name, text, stricter]) => {
        const { agent, plain, seen } = await servers();
        try {
          const bytes = Buffer.from(text, 'latin1');
          await Promise.all([send(agent, bytes, split), send(plain, bytes, split)]);
          if (stricter) {
            if (seen.agent.length > 0) disagreements.push(`${name}: served ${JSON.stringify(seen.agent)}`);
          } else if (JSON.stringify(seen.agent) !== JSON.stringify(seen.plain))
            disagreements.push(
              `${name}: listener ${JSON.stringify(seen.agent)} vs node:http ${JSON.stringify(seen.plain)}`,
            );
        } finally {
          for (const s of [agent, plain]) {
            s.closeAllConnections();
            s.close();
          }
        }
      }),
    );
    assert.deepEqual(disagreements, []);
  });
}

test('the cases exercise both outcomes: some are served, some refused', async () => {
  const outcomes = await Promise.all(
    CASES.map(async ([, text]) => {
      const { agent, plain, seen } = await servers();
      await send(plain, Buffer.from(text, 'latin1'), false);
      for (const s of [agent, plain]) {
        s.closeAllConnections();
        s.close();
      }
      return seen.plain.length;
    }),
  );
  // A case list node:http serves whole, or refuses whole, would test nothing.
  assert.ok(outcomes.filter((n) => n >= 2).length >= 5, `served with the next: ${outcomes.join(',')}`);
  assert.ok(outcomes.filter((n) => n === 0).length >= 10, `refused: ${outcomes.join(',')}`);
});
