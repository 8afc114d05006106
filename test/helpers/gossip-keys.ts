// Agents' gossip identities for tests: each agent's Ed25519 key in a file its config names, and the
// public keys its peers list (gossip.peerKeys).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newIdentity, OriginSigner } from '../../agent/gossip/signatures.ts';

export interface TestIdentity {
  node: string;
  /** For the agent's config: gossip.identity. */
  identity: { file: string };
  /** For its peers' config: one gossip.peerKeys entry. */
  peerKey: { node: string; key: string };
  /** For a GossipNode the test drives itself. */
  signer: OriginSigner;
}

export function gossipIdentities(...nodes: string[]): Record<string, TestIdentity> {
  const dir = mkdtempSync(join(tmpdir(), 'kinference-gossip-keys-'));
  const out: Record<string, TestIdentity> = {};
  for (const node of nodes) {
    const { privateKeyPem, publicKey } = newIdentity();
    const file = join(dir, `${node}.pem`);
    writeFileSync(file, privateKeyPem, { mode: 0o600 });
    out[node] = {
      node,
      identity: { file },
      peerKey: { node, key: publicKey },
      signer: new OriginSigner(privateKeyPem),
    };
  }
  return out;
}

/** Every identity's public key: what each agent of a small static cluster lists. */
export const peerKeysOf = (ids: Record<string, TestIdentity>) => Object.values(ids).map((i) => i.peerKey);
