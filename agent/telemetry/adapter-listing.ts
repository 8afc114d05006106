// The LoRA adapters each local pod's server has registered, read from its OpenAI model list
// (GET /v1/models) at a low rate: vLLM and SGLang list each adapter as an entry whose `parent` is
// its base model. A second source beside the config or the pod's annotation: an adapter loaded at
// run time (vLLM's /v1/load_lora_adapter) becomes routable without a redeploy, and the list says
// which base model each adapter runs on. It says nothing of GPU slots (lora_requests_info does):
// a registered adapter may or may not be loaded. The pure half is `adaptersOfModelList`.
import { request } from 'undici';
import type { Pod } from '../types.ts';

export interface ListedAdapter {
  name: string;
  /** The base model it runs on (`parent`). */
  base: string;
}

/** Most adapters read from one pod's list, and the longest name (the config's bound on names). */
export const LISTING_LIMITS = { adapters: 1024, nameChars: 253 };

/** The adapters of an OpenAI model list (`{data: [{id, parent}]}`), in its order, within the bounds. Pure. */
export function adaptersOfModelList(body: unknown): ListedAdapter[] {
  const data = (body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) return [];
  const out: ListedAdapter[] = [];
  const seen = new Set<string>();
  for (const raw of data) {
    const { id, parent } = (raw ?? {}) as { id?: unknown; parent?: unknown };
    if (typeof id !== 'string' || typeof parent !== 'string' || parent === '' || id === parent) continue;
    if (id === '' || id.length > LISTING_LIMITS.nameChars || parent.length > LISTING_LIMITS.nameChars) continue;
    if (seen.has(id)) continue;
    seen.add(id);
    out.push({ name: id, base: parent });
    if (out.length >= LISTING_LIMITS.adapters) break;
  }
  return out;
}

export interface AdapterListingOptions {
  /** How often each pod's list is read (limits.adapterListInterval). */
  intervalMs: number;
  timeoutMs: number;
  /** Largest list read; a larger one is dropped (the previous list stays). */
  maxBodyBytes: number;
  /** The headers that authenticate the agent to a pod (its API key). */
  auth(pod: Pod): Record<string, string>;
  /** A pod's list changed: re-apply the pods (withListed). */
  onChange(): void;
}

export class AdapterListing {
  readonly #o: AdapterListingOptions;
  #pods: readonly Pod[] = [];
  /** Per pod uid, its last list read (kept through failed reads: a stale list beats none). */
  readonly #listed = new Map<string, readonly ListedAdapter[]>();
  readonly #reading = new Set<string>();
  #timer: NodeJS.Timeout | undefined;

  constructor(options: AdapterListingOptions) {
    this.#o = options;
  }

  /** The pods to read (discovery's); new ones are read at once, gone ones forgotten. */
  setPods(pods: readonly Pod[]): void {
    const known = new Set(this.#pods.map((p) => p.uid));
    this.#pods = pods;
    const uids = new Set(pods.map((p) => p.uid));
    for (const uid of this.#listed.keys()) if (!uids.has(uid)) this.#listed.delete(uid);
    for (const pod of pods) if (!known.has(pod.uid)) void this.#read(pod);
    this.#timer ??= setInterval(() => {
      for (const pod of this.#pods) void this.#read(pod);
    }, this.#o.intervalMs).unref();
  }

  /** The pods with the adapters their servers list added to what was declared. */
  withListed(pods: readonly Pod[]): Pod[] {
    return pods.map((pod) => {
      const listed = this.#listed.get(pod.uid);
      if (!listed?.length) return pod;
      const names = listed.map((a) => a.name);
      const adapters = [...new Set([...(pod.adapters ?? []), ...names])];
      return { ...pod, adapters, models: [...new Set([...pod.models, ...adapters])] };
    });
  }

  /** The base model a listed adapter runs on, as some local pod's server says. */
  baseOf(adapter: string): string | undefined {
    for (const listed of this.#listed.values()) {
      const found = listed.find((a) => a.name === adapter);
      if (found) return found.base;
    }
    return undefined;
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  async #read(pod: Pod): Promise<void> {
    if (this.#reading.has(pod.uid)) return;
    this.#reading.add(pod.uid);
    try {
      const res = await request(`http://${pod.address}/v1/models`, {
        headers: { accept: 'application/json', ...this.#o.auth(pod) },
        signal: AbortSignal.timeout(this.#o.timeoutMs),
      });
      if (res.statusCode !== 200) return void (await res.body.dump());
      const text = await boundedText(res.body, this.#o.maxBodyBytes);
      if (text === undefined || !this.#pods.some((p) => p.uid === pod.uid)) return;
      const next = adaptersOfModelList(JSON.parse(text));
      if (sameList(this.#listed.get(pod.uid), next)) return;
      this.#listed.set(pod.uid, next);
      this.#o.onChange();
    } catch {
      // Unreachable, slow or not JSON: the scraper says what is wrong with the pod; keep the last list.
    } finally {
      this.#reading.delete(pod.uid);
    }
  }
}

async function boundedText(
  body: AsyncIterable<Uint8Array> & { destroy(): unknown },
  limit: number,
): Promise<string | undefined> {
  const parts: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.byteLength;
    if (size > limit) {
      body.destroy();
      return undefined;
    }
    parts.push(chunk);
  }
  return Buffer.concat(parts, size).toString('utf8');
}

function sameList(a: readonly ListedAdapter[] | undefined, b: readonly ListedAdapter[]): boolean {
  return a !== undefined && a.length === b.length && a.every((x, i) => x.name === b[i].name && x.base === b[i].base);
}
