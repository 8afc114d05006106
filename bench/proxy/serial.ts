// The serial probe for `bench:proxy --serial N`: one request at a time, the targets taking turns
// (A, B, C, then B, C, A, …) on one kept-alive raw socket each, a pause between requests. Every
// target meets the same moments of a shared machine, so their differences hold even when the
// machine's own noise is larger than they are; and with nothing queued anywhere, a target's added
// latency is the time its own path takes (and any wait on it), not a queue. Latency: from the
// write to the whole answer, and to the first body byte (streamed). Prints one JSON line.
// Usage: node bench/proxy/serial.ts --ports P1,P2,… --count N [--gap MS] [--stream]
import { connect, type Socket } from 'node:net';
import { parseArgs } from 'node:util';
import { answerReader } from './raw-answer.ts';

const { values } = parseArgs({
  options: {
    ports: { type: 'string' },
    count: { type: 'string', default: '500' },
    gap: { type: 'string', default: '3' },
    stream: { type: 'boolean', default: false },
    model: { type: 'string', default: 'bench-model' },
  },
});
const ports = values.ports!.split(',').map(Number);
const count = Number(values.count);
const gapMs = Number(values.gap);
const body = JSON.stringify({
  model: values.model,
  messages: [{ role: 'user', content: 'Say ok.' }],
  max_tokens: 2,
  stream: values.stream,
});
const request = Buffer.from(
  `POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
);

/** One exchange on `socket`: ms to the first body byte and to the end of the answer (Content-Length or chunked). */
function once(socket: Socket): Promise<{ whole: number; firstByte: number; ok: boolean }> {
  return new Promise((resolve) => {
    const sent = performance.now();
    const onData = answerReader(({ ok, firstByte, end }) => {
      socket.off('data', onData);
      resolve({ whole: end - sent, firstByte: firstByte - sent, ok });
    });
    socket.on('data', onData);
    socket.write(request);
  });
}

const sockets = await Promise.all(
  ports.map(
    (port) =>
      new Promise<Socket>((resolve, reject) => {
        const socket = connect({ port, host: '127.0.0.1', noDelay: true }, () => resolve(socket));
        socket.once('error', reject);
      }),
  ),
);
const whole = ports.map((): number[] => []);
const first = ports.map((): number[] => []);
const errors = ports.map(() => 0);
for (let i = 0; i < count; i++) {
  for (let k = 0; k < ports.length; k++) {
    const t = (i + k) % ports.length; // each round starts with the next target
    const r = await once(sockets[t]);
    if (r.ok) {
      whole[t].push(r.whole);
      first[t].push(r.firstByte);
    } else errors[t]++;
    await new Promise((resolve) => setTimeout(resolve, gapMs));
  }
}
for (const socket of sockets) socket.destroy();
const p = (xs: number[], q: number) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : NaN;
};
process.stdout.write(
  `${JSON.stringify({
    p50: whole.map((xs) => p(xs, 0.5)),
    p90: whole.map((xs) => p(xs, 0.9)),
    firstByteP50: first.map((xs) => p(xs, 0.5)),
    errors,
  })}\n`,
);
