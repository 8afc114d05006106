// Kubernetes: binding an agent's gossip key to its pod through the API, once per (origin agent,
// key). A receiver that meets a key it has no verdict on challenges the agent's gossip address
// (the pod IP membership lists) with a nonce; the agent answers with its key, a ServiceAccount
// token with an audience of its own, and its signature over the nonce, the key and the token. The
// receiver checks the signature, then has the token reviewed (a TokenReview, then the pod it names:
// agent/cluster/token-review.ts): the agent's ServiceAccount, its pod on the claimed node, at the
// address that answered. Only then does the key sign that agent's origin.
//
// Why a challenge and not the token alone: a token sent over gossip reaches every holder of the
// cluster key, who could present it with a key of its own. The answer must come from the pod's own
// address (it carries a nonce only that address was sent), so a leaked token binds nothing else.
//
// Verdicts are cached and bounded: trusted ones (about one per agent) apart from refused ones, so
// made-up keys can never push a real agent's verdict out. Challenges in flight are bounded too.
import { createHash, randomBytes, verify } from 'node:crypto';
import { publicKeyFromRaw, type Keyring, type OriginSigner } from './signatures.ts';
import { encodePayload, type BindingWire, type PayloadWire } from './wire.ts';

export interface BindingClaim {
  node: string;
  /** The agent's gossip address (host:port): where it was challenged and answered from. */
  agent: string;
  key: Uint8Array;
}

/** Reviews an agent's token for a claim: undefined when it holds, else why not. */
export type TokenReviewer = (token: string, claim: BindingClaim) => Promise<string | undefined>;

export interface AgentBinderOptions {
  review: TokenReviewer;
  /** Our own current token (the kubelet rotates it); undefined: we cannot answer challenges. */
  token: () => string | undefined;
  signer: OriginSigner;
  now: () => number;
  /** Trusted verdicts kept (about one per agent; default 8192). */
  maxTrusted?: number;
  /** Refused or pending verdicts kept (default 4096); the oldest are forgotten first. */
  maxRefused?: number;
  /** Challenges awaiting an answer at once (default 16); more wait for the origin's next delta. */
  maxPending?: number;
  /** A challenge unanswered this long, or a review this slow, counts as refused (default 2 s). */
  answerTimeoutMs?: number;
  /** A refused key is challenged again after this long (default 30 s): a failed review may pass later. */
  retryMs?: number;
  /** Each verdict, for the log: the reason when refused. */
  onVerdict?: (claim: BindingClaim, refused: string | undefined) => void;
}

export interface BindingChannel {
  /** How the binder sends a challenge (the gossip node's socket and seal). */
  attach(send: (to: string, binding: BindingWire) => void): void;
  /** A binding part from `from` (the datagram's source address); `reply` answers it there. */
  receive(from: string, binding: BindingWire, reply: (binding: BindingWire) => void): void;
}

/** The datagram room an answer may take: a token (~1-1.5 KB) and its key and signature. */
export const MAX_BINDING_DATAGRAM = 4096;

/** A payload that is a binding part and nothing else: the only kind allowed past the usual size. */
export const bindingOnly = (p: PayloadWire): boolean =>
  p.binding !== undefined && p.deltas.length === 0 && !p.digest && !p.want && !p.heartbeats && !p.offers && !p.budget;

export const bindingPayload = (binding: BindingWire): Uint8Array => encodePayload({ deltas: [], binding });

/** The bytes an answer signs; the domain string keeps them from reading as a stamp. */
function answerMessage(nonce: Uint8Array, key: Uint8Array, token: string): Buffer {
  const tokenHash = createHash('sha256').update(token).digest();
  return Buffer.concat([Buffer.from('kinference-agent-binding-v1\0'), nonce, key, tokenHash]);
}

/** An IPv4 peer seen by a dual-stack socket reads as `[::ffff:a.b.c.d]:port`: the same address. */
const unmapped = (hostPort: string): string => hostPort.replace(/^\[::ffff:(\d+\.\d+\.\d+\.\d+)\]/i, '$1');

const claimKey = (c: BindingClaim): string => `${c.node}\0${c.agent}\0${Buffer.from(c.key).toString('base64')}`;

interface Pending {
  claim: BindingClaim;
  key: string;
  deadline: number;
}

export class AgentBinder implements Keyring, BindingChannel {
  readonly #o: Required<Omit<AgentBinderOptions, 'onVerdict'>> & Pick<AgentBinderOptions, 'onVerdict'>;
  #send: ((to: string, binding: BindingWire) => void) | undefined;
  readonly #trusted = new Map<string, true>();
  /** Refused, or challenged and not yet decided: claim key → until when. */
  readonly #refused = new Map<string, number>();
  readonly #pending = new Map<string, Pending>();
  readonly counters = { challenges: 0, answers: 0, reviews: 0, trusted: 0, refused: 0 };

  constructor(options: AgentBinderOptions) {
    this.#o = {
      maxTrusted: 8192,
      maxRefused: 4096,
      maxPending: 16,
      answerTimeoutMs: 2_000,
      retryMs: 30_000,
      ...options,
    };
  }

  attach(send: (to: string, binding: BindingWire) => void): void {
    this.#send = send;
  }

  /** Keyring: a key signs an agent's origin once its binding was verified; the first sighting challenges it. */
  trusts(node: string, agent: string, key: Uint8Array): boolean {
    if (agent === '') return false; // an agent that cannot be named cannot be challenged
    const claim = { node, agent, key };
    const k = claimKey(claim);
    if (this.#trusted.has(k)) return true;
    const now = this.#o.now();
    if ((this.#refused.get(k) ?? -Infinity) > now) return false;
    this.#challenge(claim, k, now);
    return false;
  }

  receive(from: string, binding: BindingWire, reply: (binding: BindingWire) => void): void {
    if (!binding.answer) {
      const answer = this.#answer(binding.nonce);
      if (answer) reply(answer);
      return;
    }
    const nonce = Buffer.from(binding.nonce).toString('hex');
    const pending = this.#pending.get(nonce);
    if (pending === undefined) return; // not asked, answered already, or too late
    this.#pending.delete(nonce);
    this.counters.answers++;
    const { claim } = pending;
    if (unmapped(from) !== unmapped(claim.agent))
      return this.#decide(pending, `answered from ${from}, not the agent's address`);
    if (!binding.key || Buffer.compare(Buffer.from(binding.key), Buffer.from(claim.key)) !== 0)
      return this.#decide(pending, 'the agent at that address holds another key');
    const publicKey = publicKeyFromRaw(claim.key);
    const signed =
      publicKey !== undefined &&
      binding.token !== undefined &&
      binding.signature?.length === 64 &&
      verify(null, answerMessage(binding.nonce, claim.key, binding.token), publicKey, binding.signature);
    if (!signed) return this.#decide(pending, 'the answer is not signed by the key');
    this.counters.reviews++;
    this.#o.review(binding.token!, claim).then(
      (refused) => this.#decide(pending, refused),
      (err: unknown) => this.#decide(pending, `review failed: ${(err as Error).message}`),
    );
  }

  #challenge(claim: BindingClaim, k: string, now: number): void {
    for (const [nonce, p] of this.#pending) if (p.deadline <= now) this.#pending.delete(nonce);
    if (!this.#send || this.#pending.size >= this.#o.maxPending) return;
    const nonce = randomBytes(16);
    // Until decided, not challenged again (the answer and review have this long).
    this.#remember(k, now + 2 * this.#o.answerTimeoutMs);
    this.#pending.set(nonce.toString('hex'), { claim, key: k, deadline: now + this.#o.answerTimeoutMs });
    this.counters.challenges++;
    this.#send(claim.agent, { nonce, answer: false });
  }

  #answer(nonce: Uint8Array): BindingWire | undefined {
    const token = this.#o.token();
    if (!token) return undefined;
    const key = this.#o.signer.publicKey;
    return { nonce, answer: true, key, token, signature: this.#o.signer.sign(answerMessage(nonce, key, token)) };
  }

  #decide(pending: Pending, refused: string | undefined): void {
    if (refused === undefined) {
      this.#refused.delete(pending.key);
      this.#trusted.set(pending.key, true);
      if (this.#trusted.size > this.#o.maxTrusted) this.#trusted.delete(this.#trusted.keys().next().value!);
      this.counters.trusted++;
    } else {
      this.#remember(pending.key, this.#o.now() + this.#o.retryMs);
      this.counters.refused++;
    }
    this.#o.onVerdict?.(pending.claim, refused);
  }

  #remember(k: string, until: number): void {
    this.#refused.delete(k);
    this.#refused.set(k, until);
    if (this.#refused.size > this.#o.maxRefused) this.#refused.delete(this.#refused.keys().next().value!);
  }
}
