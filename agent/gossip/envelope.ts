// The authenticated envelope around every gossip datagram. Pure: no sockets, the clock comes in.
//
// A datagram is an Envelope whose last field is an HMAC-SHA256 tag over every byte before it.
// The receiver checks, cheapest and least trusting first: size, tag (before parsing anything a
// stranger wrote), recipient, clock, counter. Only then is the payload handed on.
import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from 'node:crypto';
import { decodeEnvelopeBody, encodeEnvelopeBody, type EnvelopeWire } from './wire.ts';

// The last two are decided before the envelope is read (source-gate.ts).
export type DropReason =
  'oversized' | 'malformed' | 'forged' | 'replayed' | 'stale' | 'misdirected' | 'unknown-source' | 'rate-limited';
export const DROP_REASONS: readonly DropReason[] = [
  'oversized',
  'malformed',
  'forged',
  'replayed',
  'stale',
  'misdirected',
  'unknown-source',
  'rate-limited',
];

const TAG_BYTES = 32;
// Field 15, wire type 2 (length-delimited), then the length 32: the tag field's fixed prefix.
const TAG_PREFIX = [(15 << 3) | 2, TAG_BYTES];
const TRAILER_BYTES = TAG_PREFIX.length + TAG_BYTES;

// A KeyObject, imported once: HMAC with a raw Buffer key re-imports it on every datagram (4x slower).
function mac(key: KeyObject, body: Uint8Array): Buffer {
  return createHmac('sha256', key).update(body).digest();
}

/** Seals payloads from one sender; its counter is (boot, seq), so it keeps growing across restarts. */
export class Sealer {
  readonly sender: string;
  boot: number;
  #key: KeyObject;
  #seq = 0;

  constructor(options: { sender: string; key: Buffer; boot: number }) {
    this.sender = options.sender;
    this.boot = Math.floor(options.boot);
    this.#key = createSecretKey(options.key);
  }

  /** `recipient`: the peer's gossip address as we send to it (it checks that it is the one meant). */
  seal(payload: Uint8Array, now: number, recipient: string): Buffer {
    if (this.#seq === 0xffffffff) {
      // seq is a uint32 (years of datagrams): start a new epoch rather than wrap into replays.
      this.boot++;
      this.#seq = 0;
    }
    const envelope: EnvelopeWire = {
      sender: this.sender,
      boot: this.boot,
      seq: ++this.#seq,
      sentAt: Math.round(now),
      payload,
      recipient,
    };
    return sealEnvelope(envelope, this.#key);
  }
}

/** Any envelope, sealed with `key`. Exposed so tests can build datagrams a Sealer never would. */
export function sealEnvelope(envelope: EnvelopeWire, key: Buffer | KeyObject): Buffer {
  const body = encodeEnvelopeBody(envelope);
  if (Buffer.isBuffer(key)) key = createSecretKey(key);
  return Buffer.concat([body, Buffer.from(TAG_PREFIX), mac(key, body)]);
}

export type Opened = { ok: true; sender: string; payload: Uint8Array } | { ok: false; reason: DropReason };

export interface OpenerOptions {
  key: Buffer;
  maxDatagram: number;
  /** Datagrams whose sender clock is further than this from ours are dropped. */
  maxClockSkewMs: number;
  /** Senders whose counters are remembered; the least recently heard is forgotten first. */
  maxSenders?: number;
  /**
   * The addresses peers send to us at (see setRecipients): a datagram naming another recipient
   * is dropped as misdirected. Empty: we cannot name ourselves (bound to a wildcard, nothing
   * advertised), and the check is skipped.
   */
  recipients?: readonly string[];
}

/**
 * Verifies datagrams and remembers, per sender, the newest (boot, seq) and which of the 32
 * before it arrived: UDP may reorder within a round, but each datagram is accepted once.
 */
export class Opener {
  #options: OpenerOptions;
  #key: KeyObject;
  #windows = new Map<string, ReplayWindow>();
  #recipients: ReadonlySet<string>;

  constructor(options: OpenerOptions) {
    this.#options = options;
    this.#key = createSecretKey(options.key);
    this.#recipients = new Set(options.recipients ?? []);
  }

  /** Our own gossip addresses, once known (a socket bound to port 0 learns its port late). */
  setRecipients(recipients: readonly string[]): void {
    this.#recipients = new Set(recipients.filter(Boolean));
  }

  open(datagram: Uint8Array, now: number): Opened {
    const { maxDatagram, maxClockSkewMs } = this.#options;
    const key = this.#key;
    if (datagram.length > maxDatagram) return { ok: false, reason: 'oversized' };
    const bodyLength = datagram.length - TRAILER_BYTES;
    if (bodyLength < 0 || datagram[bodyLength] !== TAG_PREFIX[0] || datagram[bodyLength + 1] !== TAG_PREFIX[1]) {
      return { ok: false, reason: 'malformed' };
    }
    const body = datagram.subarray(0, bodyLength);
    const tag = datagram.subarray(bodyLength + TAG_PREFIX.length);
    if (!timingSafeEqual(mac(key, body), tag)) return { ok: false, reason: 'forged' };
    let envelope: EnvelopeWire;
    try {
      envelope = decodeEnvelopeBody(body);
    } catch {
      return { ok: false, reason: 'malformed' };
    }
    if (!envelope.sender || envelope.boot <= 0 || envelope.seq <= 0) return { ok: false, reason: 'malformed' };
    if (this.#recipients.size > 0 && !this.#recipients.has(envelope.recipient))
      return { ok: false, reason: 'misdirected' };
    if (Math.abs(envelope.sentAt - now) > maxClockSkewMs) return { ok: false, reason: 'stale' };
    if (!this.#accept(envelope.sender, envelope.boot, envelope.seq, now)) return { ok: false, reason: 'replayed' };
    return { ok: true, sender: envelope.sender, payload: envelope.payload };
  }

  #accept(sender: string, boot: number, seq: number, now: number): boolean {
    let window = this.#windows.get(sender);
    if (window === undefined || boot > window.boot) {
      window = { boot, top: 0, seen: 0, heardAt: now }; // the sender restarted (or is new): a fresh counter
    } else if (boot < window.boot) {
      return false; // a datagram from before the sender's restart
    }
    if (!acceptSeq(window, seq)) return false;
    window.heardAt = now;
    if (!this.#windows.has(sender)) {
      this.#windows.set(sender, window);
      if (this.#windows.size > (this.#options.maxSenders ?? 4096)) this.#forgetLeastRecent();
    } else {
      this.#windows.set(sender, window);
    }
    return true;
  }

  /** Only past maxSenders (a cluster that shrank and grew): a scan is fine. */
  #forgetLeastRecent(): void {
    let oldest: string | undefined;
    let oldestAt = Infinity;
    for (const [sender, w] of this.#windows) {
      if (w.heardAt < oldestAt) {
        oldest = sender;
        oldestAt = w.heardAt;
      }
    }
    this.#windows.delete(oldest!);
  }
}

interface ReplayWindow {
  boot: number;
  /** Highest seq accepted. */
  top: number;
  /** Bit i set: seq top - i was accepted (bit 0 is top itself). */
  seen: number;
  heardAt: number;
}

const WINDOW = 32;

function acceptSeq(w: ReplayWindow, seq: number): boolean {
  if (seq > w.top) {
    const shift = seq - w.top;
    w.seen = shift >= WINDOW ? 1 : ((w.seen << shift) | 1) >>> 0;
    w.top = seq;
    return true;
  }
  const age = w.top - seq;
  if (age >= WINDOW) return false; // too old to tell: treat as a replay
  const bit = (1 << age) >>> 0;
  if (w.seen & bit) return false;
  w.seen = (w.seen | bit) >>> 0;
  return true;
}
