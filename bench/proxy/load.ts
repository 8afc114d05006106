// The load generator for `bench:proxy`, in its own process. Two modes:
//   rate: open loop, a request every 1/R s for D s; latency from the *scheduled* send time (so a
//         stalled target is charged for the requests it delayed), to the full answer (non-streamed)
//         or to the first byte of the body (streamed).
//   max:  closed loop, C requests always in flight for D s; completed requests per second.
// Rate mode's client (--client): `raw` (default) sends each request on one of a set of kept-alive
// raw sockets opened and used once before the clock starts (a request finding none idle opens one,
// counted as `opened`), and parses only the status, Content-Length or the chunked end; `undici` is
// the Pool this bench used first. Besides p50/p99 it reports the generator's own lateness (send
// time − scheduled time, p99 and max): a request sent late is still charged from its scheduled time,
// and a lateness tail says the generator (or the machine) set it, not the target.
// Prints one JSON line with the result.
import { connect, type Socket } from 'node:net';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { answerReader } from './raw-answer.ts';

const { values } = parseArgs({
  options: {
    url: { type: 'string' },
    mode: { type: 'string', default: 'rate' },
    rate: { type: 'string', default: '200' },
    duration: { type: 'string', default: '10' },
    connections: { type: 'string', default: '64' },
    stream: { type: 'boolean', default: false },
    model: { type: 'string', default: 'bench-model' },
    client: { type: 'string', default: 'raw' },
    sockets: { type: 'string', default: '32' },
  },
});
const url = new URL(values.url!);
const durationMs = Number(values.duration) * 1000;
const connections = Number(values.connections);
const pool = new Pool(url.origin, { connections, keepAliveTimeout: 60_000 });
const body = JSON.stringify({
  model: values.model,
  messages: [{ role: 'user', content: 'Say ok.' }],
  max_tokens: 2,
  stream: values.stream,
});
const headers = { 'content-type': 'application/json' };

/** One request; resolves with ms from `since` to the first body byte (streamed) or the end. */
async function once(since: number): Promise<number | undefined> {
  try {
    const res = await pool.request({ path: url.pathname, method: 'POST', headers, body });
    let firstByte: number | undefined;
    for await (const piece of res.body) {
      if (firstByte === undefined && (piece as Buffer).length > 0) firstByte = performance.now();
    }
    if (res.statusCode !== 200) return undefined;
    return (values.stream ? (firstByte ?? performance.now()) : performance.now()) - since;
  } catch {
    return undefined;
  }
}

const request = Buffer.from(
  `POST ${url.pathname} HTTP/1.1\r\nhost: ${url.host}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
);
const idle: Socket[] = [];
let opened = 0;

function openSocket(): Promise<Socket> {
  opened++;
  return new Promise((resolve, reject) => {
    const socket = connect({ port: Number(url.port), host: url.hostname, noDelay: true }, () => resolve(socket));
    socket.once('error', reject);
    // A kept-alive socket the target closed while idle (the agent's keep-alive timeout is 5 s) leaves
    // the pool; written to, its request would never end. An error is followed by 'close', which
    // fails the exchange in flight.
    socket.on('close', () => {
      const at = idle.indexOf(socket);
      if (at >= 0) idle.splice(at, 1);
    });
    socket.on('error', () => {});
  });
}

/** One exchange on a kept-alive raw socket: ms from `since` to the first body byte (streamed) or the end. */
async function onceRaw(since: number): Promise<number | undefined> {
  let socket = idle.pop();
  while (socket?.destroyed) socket = idle.pop();
  socket ??= await openSocket().catch(() => undefined);
  if (!socket) return undefined;
  return new Promise((resolve) => {
    const fail = () => {
      socket.off('data', onData);
      socket.destroy();
      resolve(undefined);
    };
    const onData = answerReader(({ ok, firstByte, end }) => {
      socket.off('data', onData);
      socket.off('close', fail);
      idle.push(socket);
      resolve(ok ? (values.stream ? firstByte : end) - since : undefined);
    });
    socket.on('data', onData);
    socket.once('close', fail);
    socket.write(request);
  });
}

function quantile(sorted: number[], q: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : NaN;
}

async function openLoop(ratePerS: number) {
  const raw = values.client === 'raw';
  if (raw) {
    // Every socket opened and used once before the clock starts: no connection setup is timed.
    const sockets = await Promise.all(Array.from({ length: Number(values.sockets) }, openSocket));
    idle.push(...sockets);
    await Promise.all(sockets.map(() => onceRaw(performance.now())));
    opened = 0;
  }
  const send = raw ? onceRaw : once;
  const latencies: number[] = [];
  const lateness: number[] = [];
  let errors = 0;
  const pending: Promise<void>[] = [];
  const start = performance.now();
  const total = Math.floor((ratePerS * durationMs) / 1000);
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / ratePerS;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    // A request sent up to 1 ms early (the timer's granularity) is timed from its send, one sent
    // late from its scheduled time.
    const sent = performance.now();
    lateness.push(Math.max(0, sent - due));
    pending.push(
      send(Math.max(due, sent)).then((ms) => {
        if (ms === undefined) errors++;
        else latencies.push(ms);
      }),
    );
  }
  await Promise.all(pending);
  for (const socket of idle) socket.destroy();
  latencies.sort((a, b) => a - b);
  lateness.sort((a, b) => a - b);
  return {
    mode: 'rate',
    rate: ratePerS,
    client: values.client,
    count: latencies.length,
    errors,
    p50: quantile(latencies, 0.5),
    p99: quantile(latencies, 0.99),
    lateP99: quantile(lateness, 0.99),
    lateMax: lateness.at(-1) ?? NaN,
    opened: raw ? opened : undefined,
  };
}

async function closedLoop() {
  let completed = 0;
  let errors = 0;
  const end = performance.now() + durationMs;
  const worker = async () => {
    while (performance.now() < end) {
      if ((await once(performance.now())) === undefined) errors++;
      else completed++;
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: connections }, worker));
  return { mode: 'max', connections, completed, errors, perS: completed / ((performance.now() - start) / 1000) };
}

const result = values.mode === 'max' ? await closedLoop() : await openLoop(Number(values.rate));
await pool.close();
process.stdout.write(`${JSON.stringify(result)}\n`);
