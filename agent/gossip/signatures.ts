// Origin signatures: each agent signs its own origin's state with its own Ed25519 key, so a
// receiver believes an origin's pods only when that origin's agent said them, whoever relayed
// them. The shared cluster key (envelope.ts) stays the cheap outer seal; it cannot say which agent
// spoke.
//
// What is signed is a *stamp*: the origin's id, node, agent address and incarnation, the epoch of
// its version, and a SHA-256 over every live pod entry it holds (sorted by slot, identity
// included). Any relay holding a version of the origin can recompute the hash, so the stamp
// travels with every delta unchanged. Versions are split into epochs of EPOCH_BEATS: pod changes
// start a new epoch (a new stamp); heartbeats advance within one (no signature, no state change),
// and an unsigned claim can never move an origin into a new epoch, so a forged version cannot
// freeze an origin's real updates.
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  sign,
  verify,
  type KeyObject,
} from 'node:crypto';
import type { PodRecord } from './records.ts';
import { wireTypes } from './wire.ts';

/** Versions per epoch: heartbeats between two signatures (at the default 10 s, ~10 minutes). */
export const EPOCH_BEATS = 64;
export const epochOf = (version: number): number => Math.floor(version / EPOCH_BEATS);
/** The first version of the epoch after `version`'s. */
export const nextEpochStart = (version: number): number => (epochOf(version) + 1) * EPOCH_BEATS;

export const PUBLIC_KEY_BYTES = 32;
export const SIGNATURE_BYTES = 64;

// SubjectPublicKeyInfo for Ed25519 is this 12-byte prefix and the 32 raw key bytes (RFC 8410).
const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/** A raw 32-byte Ed25519 public key as a KeyObject; undefined when it is not one. */
export function publicKeyFromRaw(raw: Uint8Array): KeyObject | undefined {
  if (raw.length !== PUBLIC_KEY_BYTES) return undefined;
  try {
    return createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: 'der', type: 'spki' });
  } catch {
    return undefined;
  }
}

/** The raw 32 bytes of an Ed25519 public key. */
export function rawPublicKey(key: KeyObject): Buffer {
  return key.export({ format: 'der', type: 'spki' }).subarray(SPKI_PREFIX.length);
}

/** An agent's signing identity: a PEM private key (PKCS#8), a key object, or a fresh one. */
export class OriginSigner {
  readonly publicKey: Buffer;
  /** The public key, imported (to verify what we signed). */
  readonly key: KeyObject;
  readonly #privateKey: KeyObject;

  constructor(privateKey?: string | Buffer | KeyObject) {
    this.#privateKey =
      privateKey === undefined
        ? generateKeyPairSync('ed25519').privateKey
        : typeof privateKey === 'string' || Buffer.isBuffer(privateKey)
          ? createPrivateKey(privateKey)
          : privateKey;
    if (this.#privateKey.asymmetricKeyType !== 'ed25519') throw new Error('gossip identity: not an Ed25519 key');
    this.key = createPublicKey(this.#privateKey);
    this.publicKey = rawPublicKey(this.key);
  }

  sign(message: Buffer): Buffer {
    return sign(null, message, this.#privateKey);
  }
}

/** A new identity as PEM (PKCS#8 private key) and its raw public key, base64: for `kinference keys`-like setups and tests. */
export function newIdentity(): { privateKeyPem: string; publicKey: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return {
    privateKeyPem: privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
    publicKey: rawPublicKey(publicKey).toString('base64'),
  };
}

/** Who may speak for a node: decides, per origin, whether a public key is that agent's. */
export interface Keyring {
  /**
   * Whether `key` (raw Ed25519) may sign the origin of the agent `agent` on `node`; `held`: the
   * key of that agent's origin held now (and not departed), if any.
   */
  trusts(node: string, agent: string, key: Uint8Array, held?: Uint8Array): boolean;
}

/** Static mode: the operator lists each node's agent public keys. */
export class StaticKeyring implements Keyring {
  readonly #byNode = new Map<string, Set<string>>();

  constructor(entries: readonly { node: string; key: string }[]) {
    for (const { node, key } of entries) {
      const raw = Buffer.from(key, 'base64');
      if (publicKeyFromRaw(raw) === undefined)
        throw new Error(`gossip.peerKeys: ${node}: not a raw Ed25519 public key`);
      let keys = this.#byNode.get(node);
      if (!keys) this.#byNode.set(node, (keys = new Set()));
      keys.add(raw.toString('base64'));
    }
  }

  trusts(node: string, _agent: string, key: Uint8Array): boolean {
    return this.#byNode.get(node)?.has(Buffer.from(key).toString('base64')) ?? false;
  }
}

/**
 * Kubernetes mode without `gossip.tokenBinding` (with it: binding.ts, keys bound to agent pods
 * through the API): an agent (node and gossip address, which membership must list for its pods
 * to be read) keeps the key it signs with for as long as its origin is held and has not left; a new key is taken only after that (a container
 * restarted with a fresh key waits for its old origin to go). An impostor can no longer take over
 * an agent that is heard; it can race one that is not (see docs/trust-model.md).
 */
export class ContinuityKeyring implements Keyring {
  trusts(_node: string, agent: string, key: Uint8Array, held?: Uint8Array): boolean {
    if (agent === '') return false; // an agent that cannot be named cannot be held to its key
    return held === undefined || Buffer.compare(Buffer.from(held), Buffer.from(key)) === 0;
  }
}

/** SHA-256 over every live entry, by slot, each as its PodEntry encoding with its identity. */
export function stateHash(pods: ReadonlyMap<number, PodRecord>): Buffer {
  const live: PodRecord[] = [];
  for (const r of pods.values()) if (!r.entry.removed) live.push(r);
  live.sort((a, b) => a.entry.slot - b.entry.slot);
  const hash = createHash('sha256');
  for (const r of live) {
    const bytes = wireTypes.podEntry.encode({ ...r.entry, info: r.info }).finish();
    hash.update(lengthPrefix(bytes.length)).update(bytes);
  }
  return hash.digest();
}

function lengthPrefix(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

export interface StampSubject {
  id: number;
  node: string;
  agent: string;
  incarnation: number;
}

/** The bytes a stamp signs. The domain string keeps a stamp from ever reading as another message. */
export function stampMessage(o: StampSubject, version: number, hash: Buffer): Buffer {
  const head = Buffer.alloc(4 + 8 + 4);
  head.writeUInt32BE(o.id >>> 0, 0);
  head.writeBigUInt64BE(BigInt(Math.floor(o.incarnation)), 4);
  head.writeUInt32BE(epochOf(version), 12);
  return Buffer.concat([
    Buffer.from('kinference-origin-stamp-v1\0'),
    head,
    Buffer.from(`${o.node}\0${o.agent}\0`),
    hash,
  ]);
}

export function verifyStamp(key: KeyObject, message: Buffer, stamp: Uint8Array): boolean {
  if (stamp.length !== SIGNATURE_BYTES) return false;
  try {
    return verify(null, message, key, stamp);
  } catch {
    return false;
  }
}
