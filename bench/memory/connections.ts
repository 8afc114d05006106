// What 1,000 concurrent HTTP connections leave resident in a plain node:http server (no agent
// code): each round opens N sockets, each posts a small request and gets a held-open event stream,
// then all end and close; after each round, one memory-reducing GC, then the process's memory by
// kind (bench/process-memory.ts). Shows the native high-water mark glibc keeps after a burst of
// connections, and whether later rounds reuse it (flat) or add to it (a leak).
//   node bench/memory/connections.ts [connections=1000] [rounds=3]
// Run with the image's malloc settings to compare: MALLOC_MMAP_THRESHOLD_=1048576 node …
import { createServer, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { memoryReducingGc } from '../../agent/memory/idle-release.ts';
import { arenasOf, residentOf } from '../process-memory.ts';

const N = Number(process.argv[2] ?? 1000);
const ROUNDS = Number(process.argv[3] ?? 3);
const release = memoryReducingGc();
const open: ServerResponse[] = [];
const server = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write('data: {}\n\n');
  open.push(res);
  if (open.length === N) for (const r of open.splice(0)) r.end('data: [DONE]\n\n');
});
server.keepAliveTimeout = 1000;
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const { port } = server.address() as AddressInfo;
const request =
  'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}';

function report(label: string): void {
  const m = residentOf(process.pid);
  const heap = Math.round(process.memoryUsage().heapTotal / 1024 / 1024);
  // glibc's own count of the main heap (gdb, when it can attach): live allocations vs free memory it keeps.
  const main = arenasOf(process.pid)?.arenas[0];
  const glibc = main ? ` (in use ${main.inUseMb}, free ${main.freeMb})` : '';
  console.log(`${label.padEnd(14)} RSS ${m.rssMb} MB | brk ${m.brkMb}${glibc} | anon ${m.anonMb} (V8 heap ${heap})`);
}

release();
report('start');
for (let round = 1; round <= ROUNDS; round++) {
  await new Promise<void>((resolve) => {
    let done = 0;
    for (let i = 0; i < N; i++) {
      const socket = connect(port, '127.0.0.1', () => socket.write(request));
      socket.on('data', (d: Buffer) => {
        if (!d.includes('[DONE]')) return;
        socket.destroy();
        if (++done === N) resolve();
      });
      socket.on('error', () => {});
    }
  });
  await new Promise((r) => setTimeout(r, 2000)); // the server side closes too
  release();
  report(`round ${round}`);
}
server.close();
