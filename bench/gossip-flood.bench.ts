// What one forged gossip datagram costs the receiver: authenticated (HMAC over ~1,200 bytes, then
// dropped as forged) versus dropped by the source gate before the HMAC (unknown source, or over
// its rate). Side by side in one run.
//   node bench/gossip-flood.bench.ts
import { Bench } from 'tinybench';
import { Opener, Sealer } from '../agent/gossip/envelope.ts';
import { SourceGate } from '../agent/gossip/source-gate.ts';

const now = Date.now();
const forged = new Sealer({ sender: 'mallory', key: Buffer.alloc(32, 1), boot: now - 1000 }).seal(
  new Uint8Array(1200).fill(7),
  now,
  '10.0.0.1:7946',
);
const opener = new Opener({ key: Buffer.alloc(32, 2), maxDatagram: 1400, maxClockSkewMs: 30_000 });
const strict = new SourceGate({ maxPerSecond: 200 });
strict.setPeers(['10.0.0.2:7946', '10.0.0.3:7946']);
const open = new SourceGate({ maxPerSecond: 200 });
open.setPeers([]);
for (let i = 0; i < 1000; i++) open.admit('10.6.6.6', now); // its bucket is empty: the flood is over its rate

let sink = 0;
const bench = new Bench({ time: 1500, warmupTime: 300 });
bench
  .add('HMAC check (forged, dropped after the tag)', () => {
    if (!opener.open(forged, now).ok) sink++;
  })
  .add('gate: unknown source (peers by address)', () => {
    if (strict.admit('10.6.6.6', now) !== undefined) sink++;
  })
  .add("gate: over the source's rate", () => {
    if (open.admit('10.6.6.6', now) !== undefined) sink++;
  });
await bench.run();
console.log(`datagram ${forged.length} bytes; node ${process.version}`);
const hmac = bench.tasks[0].result.state === 'completed' ? bench.tasks[0].result.latency.mean : NaN;
for (const task of bench.tasks) {
  const result = task.result;
  if (result.state !== 'completed') continue;
  console.log(
    `${task.name}: ${(result.latency.mean * 1000).toFixed(2)} µs/op, ${(hmac / result.latency.mean).toFixed(0)}x cheaper than the HMAC`,
  );
}
if (sink === -1) console.log(sink);
