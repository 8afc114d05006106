// Protobuf's varint length, for sizing datagrams before encoding them (gossip and the budget
// counters that ride on it share one wire format).

/** Bytes a non-negative integer takes as a protobuf varint. */
export function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}
