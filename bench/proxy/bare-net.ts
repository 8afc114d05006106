// A floor below bare-node for `bench:proxy`: Node moving bytes and nothing else. Each client
// connection gets its own upstream connection and every read is written on as it is: no HTTP
// parsing, no body assembly, no headers. What is left is libuv, the sockets and one read and one
// write each way, so the difference to bare-node is node:http's (and undici's) own share.
// Usage: node bench/proxy/bare-net.ts --upstream HOST:PORT (prints "listening PORT").
import { connect, createServer } from 'node:net';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { upstream: { type: 'string' } } });
const colon = values.upstream!.lastIndexOf(':');
const upstream = { host: values.upstream!.slice(0, colon), port: Number(values.upstream!.slice(colon + 1)) };

const server = createServer({ noDelay: true }, (client) => {
  const pod = connect({ ...upstream, noDelay: true });
  client.on('data', (chunk) => pod.write(chunk));
  pod.on('data', (chunk) => client.write(chunk));
  client.on('close', () => pod.destroy());
  pod.on('close', () => client.destroy());
  client.on('error', () => {});
  pod.on('error', () => {});
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening ${typeof address === 'object' && address ? address.port : ''}\n`);
});
