// What bench:memory (bench/memory.ts) and bench/memory/idle.ts share: starting a helper process
// and the agent's config in front of the bench's upstream and gossiping peers.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, createPrivateKey } from 'node:crypto';
import { OriginSigner } from '../../agent/gossip/signatures.ts';

export const BENCH_MODEL = 'bench-model';

/** Starts `node script args` (kept in `children`) and resolves with the first stdout match of `ready`. */
export function startHelper(
  children: ChildProcess[],
  script: string,
  args: string[],
  ready: RegExp,
  env = process.env,
): Promise<RegExpExecArray> {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'inherit'], env });
  children.push(child);
  let output = '';
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      output += d;
      const match = ready.exec(output);
      if (match) resolve(match);
    });
    child.once('exit', (code) => reject(new Error(`${script} exited ${code}:\n${output}`)));
  });
}

/** The measured agent: one fast upstream pod, gossip with the bench's peers under `ttl`. */
/** Simulated peer k's gossip identity: derived from k, so the agent's config can list its key. */
export function benchPeerSigner(k: number): OriginSigner {
  const seed = createHash('sha256').update(`kinference-bench-peer-${k}`).digest();
  // PKCS#8 for an Ed25519 seed (RFC 8410): a fixed 16-byte prefix, then the 32 bytes.
  const der = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]);
  return new OriginSigner(createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }));
}

export function benchAgentConfig(gossipPort: number, peers: string[], upstream: string, ttl: string): object {
  return {
    node: 'bench',
    listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${gossipPort}` },
    scrapeInterval: '100ms',
    gossip: {
      key: { env: 'KINFERENCE_BENCH_GOSSIP_KEY' },
      ttl,
      peerPodCidrs: ['127.0.0.0/8'],
      peerKeys: peers.map((_, k) => ({ node: `peer-${k}`, key: benchPeerSigner(k).publicKey.toString('base64') })),
    },
    peers,
    pods: [{ name: 'fast-0', namespace: 'bench', address: upstream, engine: 'vllm', models: [BENCH_MODEL] }],
    logLevel: 'error',
  };
}
