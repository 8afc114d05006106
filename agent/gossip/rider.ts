// A state carried in gossip's datagrams (the overflow budget counters: agent/budget/exchange.ts).
import type { CounterKeys } from '../budget/signing.ts';

/**
 * A state that rides on gossip: its bytes go in Payload.budget, in datagrams of their own, sealed
 * like every datagram, to the peers gossip picks each round; gossip never decodes them.
 */
export interface GossipRider {
  /**
   * Once a round, before asking: the agents gossip knows of (origins held or peers listed, the
   * larger, itself included), and whether an origin instance (node, incarnation) is alive now;
   * with signed gossip, the origins' keys and our signature (agent/budget/signing.ts).
   */
  round(agents: number, alive: (node: string, incarnation: number) => boolean, keys?: CounterKeys): void;
  /** What to send one of this round's peers, at most `maxBytes`; undefined: nothing. */
  ask(maxBytes: number): Uint8Array | undefined;
  /** A peer's bytes: the answers to send back, each at most `maxBytes`. Throws when malformed. */
  receive(bytes: Uint8Array, maxBytes: number): Uint8Array[];
}
