// The admin listener's answers on the wire, byte for byte (Date aside): the headers, their order
// and case, the length, HEAD, and how the target is read. They are the answers it gave when it
// ran on Hono (docs/api.md, "Admin listener"), so probes, Prometheus and scripts see no change.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { startStack, type Stack } from './helpers/stack.ts';

let stack: Stack;
let port: number;

/** The raw answer to a raw request (read until the agent closes), its Date value masked. */
function exchange(request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => (answer += d));
    socket.on('close', () => resolve(answer.replace(/\r\nDate: [^\r]*\r\n/, '\r\nDate: -\r\n')));
    socket.on('error', reject);
    socket.write(request, 'latin1');
  });
}
const get = (target: string, version = '1.1') =>
  exchange(`GET ${target} HTTP/${version}\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
const head = (target: string) => exchange(`HEAD ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
const lines = (...l: string[]) => l.join('\r\n');
const notFound = (message: string) => {
  const body = `{"error":{"message":"${message}","type":"invalid_request_error","param":null,"code":null}}`;
  return lines(
    'HTTP/1.1 404 Not Found',
    'content-type: application/json',
    'x-kinference-route: rejected',
    'Date: -',
    'Connection: close',
    `Content-Length: ${Buffer.byteLength(body)}`,
    '',
    body,
  );
};

describe('the admin listener on the wire', () => {
  before(async () => {
    stack = await startStack();
    port = Number(new URL(stack.admin).port);
  });
  after(() => stack.close());

  it('answers a probe with its type first and the length after node’s own headers', async () => {
    assert.equal(
      await get('/healthz'),
      lines(
        'HTTP/1.1 200 OK',
        'Content-Type: text/plain; charset=UTF-8',
        'Date: -',
        'Connection: close',
        'Content-Length: 2',
        '',
        'ok',
      ),
    );
  });

  it('gives an HTTP/1.0 client the length with the answer’s headers', async () => {
    assert.equal(
      await exchange('GET /healthz HTTP/1.0\r\n\r\n'),
      lines(
        'HTTP/1.1 200 OK',
        'Content-Type: text/plain; charset=UTF-8',
        'Content-Length: 2',
        'Date: -',
        'Connection: close',
        '',
        'ok',
      ),
    );
  });

  it('answers HEAD as GET, headers lowercased, without a body or a length', async () => {
    assert.equal(
      await head('/readyz'),
      lines('HTTP/1.1 200 OK', 'content-type: application/json', 'Date: -', 'Connection: close', '', ''),
    );
    assert.equal(
      await head('/nope'),
      lines(
        'HTTP/1.1 404 Not Found',
        'content-type: application/json',
        'x-kinference-route: rejected',
        'Date: -',
        'Connection: close',
        '',
        '',
      ),
    );
  });

  it('serves the Prometheus page with prom-client’s content type', async () => {
    const answer = await get('/metrics');
    const [headers, body] = answer.split('\r\n\r\n');
    assert.match(
      headers,
      /^HTTP\/1\.1 200 OK\r\ncontent-type: text\/plain; version=0\.0\.4; charset=utf-8\r\nDate: -\r\n/,
    );
    assert.equal(Number(/Content-Length: (\d+)$/.exec(headers)?.[1]), Buffer.byteLength(body, 'latin1'));
    assert.match(body, /^# HELP kinference_process_cpu_user_seconds_total Total user CPU time spent in seconds\.\n/);
  });

  it('reads the path as the URL parser does, escapes decoded', async () => {
    for (const target of ['/%68ealthz', '/x/../healthz', '/healthz#x', 'http://example.com/healthz?a'])
      assert.match(await get(target), /^HTTP\/1\.1 200 OK\r\n/, target);
    assert.equal(await get('/healthz/'), notFound('no route GET /healthz/'));
    assert.equal(await get('/debug%2Fstate'), notFound('no route GET /debug%2Fstate'), 'an escaped / stays escaped');
    assert.equal(await get('/n%zzpe'), notFound('no route GET /n%zzpe'), 'an invalid escape stays as written');
    assert.equal(
      await exchange('POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}'),
      notFound('no route POST /healthz'),
    );
  });

  it('refuses a target the URL parser cannot read, or a Host it reads as another host, with a bare 400', async () => {
    const bare = lines(
      'HTTP/1.1 400 Bad Request',
      'Date: -',
      'Connection: close',
      'Transfer-Encoding: chunked',
      '',
      '0',
      '',
      '',
    );
    assert.equal(await get('/\\healthz'), bare);
    assert.equal(await exchange('OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'), bare);
    assert.equal(await exchange('GET /healthz HTTP/1.1\r\nHost: a@b\r\nConnection: close\r\n\r\n'), bare);
  });

  it('reads query values with + as a space, escapes decoded, the first of a repeated key, no fragment', async () => {
    const model = async (query: string) => {
      const body = (await get(`/explain?${query}`)).split('\r\n\r\n')[1];
      return (JSON.parse(body) as { error: { message: string } }).error.message;
    };
    assert.equal(await model('model=a%20b+c%2Bd'), 'The model `a b c+d` does not exist.');
    assert.equal(await model('model=a%zz%41'), 'The model `a%zzA` does not exist.');
    assert.equal(await model('mod%65l=a&model=b'), 'The model `a` does not exist.');
    assert.equal(await model('model=a#b'), 'The model `a` does not exist.');
    assert.equal(await model('model&model=q'), "query parameter 'model' is required");
  });
});
