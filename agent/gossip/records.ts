// What the gossip state holds per origin and per pod, and the conversions between the router's
// PodEstimate and the wire's pod entry. Pure functions of data.
import type { KeyObject } from 'node:crypto';
import type { Pod, PodEstimate } from '../types.ts';
import { loraOf, loraWireOf, sameLora, withResident } from './lora-wire.ts';
import { calibrationChanged, decodeCalibration, encodeCalibration } from './calibration-wire.ts';
import { sanitizeSummary } from '../predict/calibration-prior.ts';
import { engineCode, engineName, type PodEntryWire, type PodInfoWire } from './wire.ts';
import { entrySize, infoFieldSize } from './wire-size.ts';

export interface PodRecord {
  /** The entry as received or written. Immutable once stored: a change is a new record. Its own
   * `info` field, if any, is not authoritative; `info` below is. */
  entry: PodEntryWire;
  /** Identity; undefined on tombstones. */
  info?: PodInfoWire;
  /** Origin version at which the identity last changed: receivers older than that need it. */
  infoVersion: number;
  /** Encoded sizes, so deltas are packed without encoding twice. */
  size: number;
  infoSize: number;
  /** The router's view of the identity, built on first use. */
  pod?: Pod;
}

/**
 * Whether the cluster's membership lists an origin's agent: `unknown` until it has (membership
 * may lag a new agent, or name it differently), `left` once a listed agent is no longer listed.
 */
export type Membership = 'unknown' | 'member' | 'left';

export interface OriginRecord {
  /** Wire id of this origin incarnation. */
  id: number;
  node: string;
  /** The agent's gossip address ('' when unknown): with `node`, which agent this is. */
  agent: string;
  membership: Membership;
  incarnation: number;
  /** Highest version held: every entry at or below it is exactly as the origin wrote it. */
  version: number;
  /** Newest entry version held (or the floor): later versions were heartbeats only. */
  dataVersion: number;
  /** No removals at or below this version are held; older askers get a full state. */
  floor: number;
  /** Set right after applying part of a full state: the version its continuation starts at. */
  resumeAt: number;
  /** Local clock when the origin was last known to advance (relayed ages subtracted). */
  lastAdvance: number;
  /** Local clock when pod data last changed here: recent changes go first in digests. */
  lastData: number;
  /** By slot, tombstones included. */
  pods: Map<number, PodRecord>;
  /** No longer held (expired or replaced); references to it are stale. */
  gone: boolean;
  /** A signing origin's Ed25519 public key: raw (as sent) and imported (to verify). */
  keyRaw?: Uint8Array;
  key?: KeyObject;
  /** The origin's signature over its state in the epoch of `version` (agent/gossip/signatures.ts). */
  stamp?: Uint8Array;
}

export function newOrigin(id: number, node: string, agent: string, incarnation: number, now: number): OriginRecord {
  return {
    id,
    node,
    agent,
    membership: 'unknown',
    incarnation,
    version: 0,
    dataVersion: 0,
    floor: 0,
    resumeAt: -1,
    lastAdvance: now,
    lastData: now,
    pods: new Map(),
    gone: false,
  };
}

// Identities are immutable and often shared (one decoded entry applied to many states in the
// bench), so their encoded size is computed once.
const infoSizes = new WeakMap<PodInfoWire, number>();

export function makeRecord(entry: PodEntryWire, info: PodInfoWire | undefined, infoVersion: number): PodRecord {
  let infoSize = 0;
  if (info) {
    infoSize = infoSizes.get(info) ?? infoFieldSize(info);
    infoSizes.set(info, infoSize);
  }
  return { entry, info, infoVersion, size: entrySize(entry), infoSize };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Identity as gossiped, in fewer bytes: a UUID uid as 16 bytes, a static-mode uid
 * (`namespace/name`) not at all, `node` only when it is not the origin's own (it always is).
 */
export function infoOf(pod: Pod, originNode: string): PodInfoWire {
  const uuid = UUID.test(pod.uid) ? Buffer.from(pod.uid.replaceAll('-', ''), 'hex') : undefined;
  const derived = pod.uid === `${pod.namespace}/${pod.name}`;
  return {
    uid: uuid || derived ? '' : pod.uid,
    uuid,
    name: pod.name,
    namespace: pod.namespace,
    node: pod.node === originNode ? '' : pod.node,
    address: pod.address,
    // Base models only: a pod may serve dozens of adapters; peers learn those it holds (entryOf).
    models: pod.adapters?.length ? pod.models.filter((m) => !pod.adapters!.includes(m)) : [...pod.models],
    engine: engineCode(pod.engine),
  };
}

function uidOf(info: PodInfoWire): string {
  if (info.uuid) {
    const hex = Buffer.from(info.uuid).toString('hex');
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
  return info.uid || `${info.namespace}/${info.name}`;
}

export function podOf(info: PodInfoWire, originNode: string): Pod {
  const engine = engineName(info.engine);
  const pod: Pod = {
    uid: uidOf(info),
    name: info.name,
    namespace: info.namespace,
    node: info.node || originNode,
    address: info.address,
    models: info.models,
  };
  if (engine) pod.engine = engine;
  return pod;
}

export function sameInfo(a: PodInfoWire | undefined, b: PodInfoWire): boolean {
  return (
    a !== undefined &&
    a.uid === b.uid &&
    (a.uuid === undefined ? b.uuid === undefined : b.uuid !== undefined && Buffer.compare(a.uuid, b.uuid) === 0) &&
    a.name === b.name &&
    a.namespace === b.namespace &&
    a.node === b.node &&
    a.address === b.address &&
    a.engine === b.engine &&
    a.models.length === b.models.length &&
    a.models.every((m, i) => m === b.models[i])
  );
}

const count = (x: number): number => (Number.isFinite(x) && x > 0 ? Math.min(Math.round(x), 0xffffffff) : 0);
const measured = (x: number): number => (Number.isFinite(x) ? Math.fround(x) : 0);

/**
 * The entry for an estimate, values rounded as the wire carries them (float32, whole counts),
 * so the origin compares against exactly what its receivers hold.
 */
export function entryOf(e: PodEstimate, slot: number, version: number, incarnation: number): PodEntryWire {
  const p = e.params;
  return {
    slot,
    version,
    removed: false,
    queued: measured(e.queued),
    queuedNow: count(e.queuedNow),
    running: count(e.running),
    kvCache: Number.isNaN(e.kvCache) ? NaN : measured(e.kvCache),
    params: [
      measured(p.base),
      measured(p.perQueued),
      measured(p.perRunning),
      measured(p.perKPromptTokens),
      measured(p.perKPendingTokens ?? 0),
    ],
    at: Math.round(e.at - incarnation),
    ...(e.prefixSummary ? { prefixSummary: e.prefixSummary } : {}),
    ...(e.lora ? loraWireOf(e.lora) : {}),
    ...calibrationField(e),
  };
}

function calibrationField(e: PodEstimate): { calibration?: Uint8Array } {
  const calibration = encodeCalibration(e.calibration);
  return calibration ? { calibration } : {};
}

export function tombstoneOf(slot: number, version: number): PodEntryWire {
  return { slot, version, removed: true, queued: 0, queuedNow: 0, running: 0, kvCache: 0, params: [], at: 0 };
}

const near = (a: number, b: number, absolute: number, relative: number): boolean =>
  Math.abs(a - b) <= Math.max(absolute, relative * Math.max(Math.abs(a), Math.abs(b)));

/**
 * Whether a new load is worth a new version. Every version costs every agent bandwidth, and a
 * scrape every 100 ms moves the windowed average and the predictor a little each time; these
 * bounds are well below what changes a routing decision (a queued request, 2% of KV cache, a
 * millisecond or 2% of predicted TTFT).
 */
export function loadChanged(prev: PodEntryWire, next: PodEntryWire): boolean {
  if (prev.removed) return true;
  if (prev.queuedNow !== next.queuedNow || prev.running !== next.running) return true;
  if (!near(prev.queued, next.queued, 0.1, 0.05)) return true;
  if (!sameBytes(prev.prefixSummary, next.prefixSummary)) return true;
  if (!sameLora(prev, next)) return true;
  if (calibrationChanged(prev.calibration, next.calibration)) return true;
  if (Number.isNaN(prev.kvCache) !== Number.isNaN(next.kvCache)) return true;
  if (!Number.isNaN(next.kvCache) && !near(prev.kvCache, next.kvCache, 0.02, 0)) return true;
  return prev.params.some((x, i) => !near(x, next.params[i], 1, 0.02));
}

function sameBytes(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  if (a === b) return true;
  if (!a || !b || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The router's estimate for a held pod entry. `ageMs` is local: since the origin last advanced. */
export function estimateOf(origin: OriginRecord, record: PodRecord, now: number): PodEstimate & { ageMs: number } {
  const e = record.entry;
  const lora = loraOf(e);
  record.pod ??= withResident(podOf(record.info!, origin.node), lora);
  // An origin speaks for its own node's pods only: a summary of another node's pod is not read.
  const calibration =
    e.calibration && record.pod.node === origin.node ? sanitizeSummary(decodeCalibration(e.calibration)) : undefined;
  const ageMs = Math.max(0, now - origin.lastAdvance);
  return {
    pod: record.pod,
    queued: e.queued,
    queuedNow: e.queuedNow,
    running: e.running,
    kvCache: e.kvCache,
    params: {
      base: e.params[0],
      perQueued: e.params[1],
      perRunning: e.params[2],
      perKPromptTokens: e.params[3],
      perKPendingTokens: e.params[4] ?? 0,
    },
    // In the receiver's clock: when the origin last confirmed this estimate still holds (an
    // origin re-publishes anything that changed, and advances at least every heartbeat).
    at: now - ageMs,
    origin: origin.node,
    version: e.version,
    ageMs,
    ...(e.prefixSummary ? { prefixSummary: e.prefixSummary } : {}),
    ...(lora ? { lora } : {}),
    ...(calibration ? { calibration } : {}),
  };
}
