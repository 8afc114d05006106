// The parts of undici the agent uses (connection pools, `request`, its error classes), loaded
// without undici's index: the index loads every part of undici at once (fetch, WebSocket,
// EventSource, cache stores, mocks, proxy agents: 99 modules, 1.8 MB of source), which the agent
// never uses. Measured (README "Memory"): the index costs 5.1 MB of V8 heap, these parts 2.4 MB.
// They are the same module instances undici's index loads (CommonJS caches them by path), so an
// Agent made by `import { Agent } from 'undici'` (tests, callers) is an instance of this Agent too.
import { createRequire } from 'node:module';
import type * as Undici from 'undici';

const require = createRequire(import.meta.url);

/** Loads one of undici's modules by its path inside the package (undici has no exports map). */
function part<T>(path: string): T {
  try {
    return require(`undici/${path}`) as T;
  } catch (error) {
    throw new Error(`could not load undici/${path} (the undici package's layout changed?)`, { cause: error });
  }
}

// What undici's index does before exporting: the request/stream/pipeline methods on every dispatcher.
const DispatcherClass = part<{ prototype: object }>('lib/dispatcher/dispatcher.js');
Object.assign(DispatcherClass.prototype, part<object>('lib/api/index.js'));
const global = part<{ getGlobalDispatcher: () => Undici.Dispatcher }>('lib/global.js');

export const Agent = part<typeof Undici.Agent>('lib/dispatcher/agent.js');
export type Agent = Undici.Agent;
export const errors = part<typeof Undici.errors>('lib/core/errors.js');

type RequestOptions = { dispatcher?: Undici.Dispatcher } & Omit<
  Undici.Dispatcher.RequestOptions,
  'origin' | 'path' | 'method'
> &
  Partial<Pick<Undici.Dispatcher.RequestOptions, 'method'>>;

/** undici's top-level `request(url, options)`: the URL split into origin and path, as its index does. */
export function request(url: string | URL, options: RequestOptions = {}): Promise<Undici.Dispatcher.ResponseData> {
  const { dispatcher = global.getGlobalDispatcher(), ...rest } = options;
  const parsed = typeof url === 'string' ? new URL(url) : url;
  return dispatcher.request({
    ...rest,
    origin: parsed.origin,
    path: parsed.search ? `${parsed.pathname}${parsed.search}` : parsed.pathname,
    method: options.method ?? (options.body ? 'PUT' : 'GET'),
  });
}
