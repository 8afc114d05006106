// The scraper's connection to one pod (agent/telemetry/scrape-connection.ts, an undici Client)
// against raw TCP servers on loopback: pages by length and chunked on one kept-alive connection, an
// error status read and the connection kept, malformed answers and a refused connect failing the
// scrape with the next one reconnecting, and bytes nobody asked for dropping the connection.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { ScrapeConnection, type ResponseSink } from '../agent/telemetry/scrape-connection.ts';

const servers: Server[] = [];
const sockets: Socket[] = [];
after(() => {
  for (const s of sockets) s.destroy();
  for (const s of servers) s.close();
});

/** A TCP server answering the n-th GET it reads with `answers(n)`. */
async function rawServer(answer: (index: number) => string): Promise<{ address: string; connections: number }> {
  const stats = { address: '', connections: 0 };
  let index = 0;
  const server = createServer((socket) => {
    stats.connections++;
    sockets.push(socket);
    socket.on('error', () => {});
    let pending = '';
    socket.on('data', (d: Buffer) => {
      pending += d.toString('latin1');
      for (let end = pending.indexOf('\r\n\r\n'); end >= 0; end = pending.indexOf('\r\n\r\n')) {
        pending = pending.slice(end + 4);
        socket.write(answer(index++));
      }
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  stats.address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return stats;
}

interface Got {
  status?: number;
  coding?: string;
  body: string;
  error?: string;
}

function get(connection: ScrapeConnection, target?: string): Promise<Got> {
  return new Promise((resolve) => {
    const got: Got = { body: '' };
    const sink: ResponseSink = {
      head: (status, coding) => Object.assign(got, { status, coding }),
      data: (chunk) => (got.body += chunk.toString('latin1')),
      end: () => resolve(got),
      error: (message) => resolve({ ...got, error: message }),
    };
    connection.get(sink, target);
  });
}

const page = 'vllm:num_requests_waiting 1\n';
const byLength = `HTTP/1.1 200 OK\r\ncontent-length: ${page.length}\r\n\r\n${page}`;
const chunked = `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nvllm:\r\n${(page.length - 5).toString(16)}\r\n${page.slice(5)}\r\n0\r\n\r\n`;
const notFound = 'HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found';

test('pages by length and chunked, and an error status, on one kept-alive connection', async () => {
  const answers = [byLength, chunked, notFound, byLength];
  const server = await rawServer((i) => answers[i]);
  const connection = new ScrapeConnection({ address: server.address, path: '/metrics', headers: {} });
  const got: Got[] = [];
  for (let i = 0; i < answers.length; i++) {
    got.push(await get(connection, i === 3 ? connection.request('/metrics?name[]=x') : undefined));
    await new Promise(setImmediate); // undici frees the connection on the turn after an answer
  }
  assert.deepEqual(
    got.map((g) => [g.status, g.body]),
    [
      [200, page],
      [200, page],
      [404, 'not found'],
      [200, page],
    ],
  );
  assert.equal(got[0].coding, 'identity');
  assert.equal(server.connections, 1);
  await connection.close();
});

test('a malformed answer and a refused connect fail the scrape; the next one reconnects', async () => {
  const answers = ['HTTP/1.1 200 OK\r\nbad header line\r\n\r\n', byLength];
  const server = await rawServer((i) => answers[i]);
  const connection = new ScrapeConnection({ address: server.address, path: '/metrics', headers: {} });
  const bad = await get(connection);
  assert.ok(bad.error);
  assert.equal(bad.body, '');
  assert.equal((await get(connection)).body, page);
  assert.equal(server.connections, 2);
  await connection.close();

  const gone = await rawServer(() => '');
  servers.pop()!.close();
  await new Promise((r) => setTimeout(r, 50));
  const refused = new ScrapeConnection({ address: gone.address, path: '/metrics', headers: {} });
  assert.match((await get(refused)).error ?? '', /ECONNREFUSED/);
  await refused.close();
});

test('bytes nobody asked for drop the connection; abort ends a scrape without a callback', async () => {
  const server = await rawServer((i) =>
    i === 0 ? `${byLength}HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nevil` : byLength,
  );
  const connection = new ScrapeConnection({ address: server.address, path: '/metrics', headers: {} });
  assert.equal((await get(connection)).body, page);
  await new Promise((r) => setTimeout(r, 20));
  const second = await get(connection);
  assert.equal(second.body, page);
  assert.equal(server.connections, 2, 'not reused after the unasked-for answer');

  let called = false;
  const sink: ResponseSink = {
    head: () => (called = true),
    data: () => (called = true),
    end: () => (called = true),
    error: () => (called = true),
  };
  connection.get(sink);
  connection.abort(sink);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(called, false);
  assert.equal((await get(connection)).body, page, 'the next scrape goes out');
  await connection.close();
});
