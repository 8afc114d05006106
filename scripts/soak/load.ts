// One phase of `npm run soak`'s load, in its own process so that the load generators (32 fuzzing
// clients, 1,000 stream readers, 3 MB bodies, slowloris sockets, a gossip flood) do not share an
// event loop with the probe that measures the agent. Started by scripts/soak.ts with a JSON
// argument; sends back what it saw over IPC and exits.
import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import { Agent, request } from 'undici';
import { mulberry32 } from '../../shared/sim/random.ts';
import { requestText } from '../../test/fixtures/fuzz-requests.ts';

export interface LoadSpec {
  phase: 'fuzz' | 'streams' | 'abuse';
  api: string;
  model: string;
  fuzz: number;
  streams: number;
  seconds: number;
  slowloris: number;
  gossipPort: number;
  /** Which abuse runs (default all three). */
  abuse: ('slowloris' | 'large' | 'gossip')[];
}

export interface LoadResult {
  /** Failures by kind (5xx, connection errors, streams without [DONE]). */
  errors: Record<string, number>;
  byStatus: Record<number, number>;
  /** Answers per pod (x-kinference-route). */
  routes: Record<string, number>;
  /** p99 time to the answer's headers per pod, ms (streams: the pod's first token). */
  headersP99: Record<string, number>;
  sent: number;
  /** Requests that failed without an answer, by error code. */
  failures: Record<string, number>;
}

const spec = JSON.parse(process.argv[2]) as LoadSpec;
process.on('disconnect', () => process.exit(0)); // the soak ended (or died): so does its load
const client = new Agent({ connections: 4096, keepAliveTimeout: 10_000 });
const result: LoadResult = { errors: {}, byStatus: {}, routes: {}, headersP99: {}, sent: 0, failures: {} };
const headerTimes: Record<string, number[]> = {};
const count = (kind: string) => (result.errors[kind] = (result.errors[kind] ?? 0) + 1);

async function post(body: string, stream = false): Promise<{ status: number; route: string }> {
  const t = performance.now();
  result.sent++;
  try {
    const res = await request(`${spec.api}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: client,
      headers: { 'content-type': 'application/json' },
      body,
    });
    const route = String(res.headers['x-kinference-route'] ?? '');
    (headerTimes[route] ??= []).push(performance.now() - t);
    const text = await res.body.text();
    if (stream && res.statusCode === 200 && !text.endsWith('data: [DONE]\n\n')) count('stream without [DONE]');
    result.byStatus[res.statusCode] = (result.byStatus[res.statusCode] ?? 0) + 1;
    result.routes[route] = (result.routes[route] ?? 0) + 1;
    return { status: res.statusCode, route };
  } catch (error) {
    result.byStatus[0] = (result.byStatus[0] ?? 0) + 1;
    // Which failure, so a lost request can be placed (the client's own timeout, a reset, …).
    const code = (error as { code?: string }).code ?? (error as Error).name;
    result.failures[code] = (result.failures[code] ?? 0) + 1;
    return { status: 0, route: '' };
  }
}

async function fuzz(): Promise<void> {
  const rand = mulberry32(12);
  let sent = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (sent < spec.fuzz) {
        sent++;
        const r = await post(requestText(rand, spec.model));
        if (r.status >= 500 || r.status === 0) count(`fuzz ${r.status}`);
      }
    }),
  );
}

async function streams(): Promise<void> {
  const until = Date.now() + spec.seconds * 1000;
  await Promise.all(
    Array.from({ length: spec.streams }, async (_, i) => {
      await new Promise((r) => setTimeout(r, (i * 10) % 2000)); // ramp up over 2 s
      while (Date.now() < until) {
        const body = JSON.stringify({
          model: spec.model,
          messages: [{ role: 'user', content: `stream ${i}` }],
          max_tokens: 100,
          stream: true,
        });
        const r = await post(body, true);
        if (r.status !== 200) count(`stream ${r.status}`);
      }
    }),
  );
}

/** Slowloris sockets, 4 clients posting 3 MB bodies and a forged-gossip flood, for spec.seconds. */
async function abuse(): Promise<void> {
  const until = Date.now() + spec.seconds * 1000;
  const url = new URL(spec.api);
  const slowloris = Array.from({ length: spec.abuse.includes('slowloris') ? spec.slowloris : 0 }, () => {
    const socket = connect(Number(url.port), url.hostname);
    socket.on('error', () => {});
    socket.write(
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n',
    );
    const drip = setInterval(() => socket.write('x'), 1000);
    return () => {
      clearInterval(drip);
      socket.destroy();
    };
  });
  const big = JSON.stringify({
    model: spec.model,
    messages: [{ role: 'user', content: 'lorem ipsum '.repeat(250_000) }],
    max_tokens: 1,
  });
  const large = Promise.all(
    Array.from({ length: spec.abuse.includes('large') ? 4 : 0 }, async () => {
      while (Date.now() < until) {
        const r = await post(big);
        if (r.status >= 500 || r.status === 0) count(`large body ${r.status}`);
      }
    }),
  );
  const udp = createSocket('udp4');
  const junk = Buffer.alloc(1200, 0x42);
  const flood = setInterval(() => {
    if (spec.abuse.includes('gossip')) for (let i = 0; i < 200; i++) udp.send(junk, spec.gossipPort, '127.0.0.1');
  }, 10);
  await large;
  await new Promise((r) => setTimeout(r, Math.max(0, until - Date.now())));
  clearInterval(flood);
  udp.close();
  for (const stop of slowloris) stop();
}

const phases = { fuzz, streams, abuse };
await phases[spec.phase]();
for (const [route, times] of Object.entries(headerTimes)) {
  times.sort((a, b) => a - b);
  result.headersP99[route] = Math.round(times[Math.floor(times.length * 0.99)] ?? NaN);
}
await client.close();
await new Promise<void>((resolve) => process.send?.(result, () => resolve()));
process.exit(0);
