// glibc keeps the memory that native code (Node's sockets and HTTP parsers, V8's own tables) frees
// in the middle of its heap: it returns only the heap's top on its own, and the rest stays resident
// until malloc_trim(3) gives the free pages back. Node has no binding for it, so the agent calls
// it through koffi (an optional dependency: a prebuilt FFI, no compiler at install) from the idle
// memory release. In `npm run soak`, after 1,000 concurrent streams and the HTTP parsers dropped,
// glibc's main heap held ~12 MB free that only this returns (README "Soak"). Where koffi is not
// installed or the C library has no malloc_trim (musl), the release goes on without it.
import { createRequire } from 'node:module';

interface Koffi {
  load(path: string): { func(signature: string): (pad: number) => number };
}

/** malloc_trim(0) of the process's C library, or why it cannot be called here. */
export function mallocTrim(): { trim: () => void } | { unavailable: string } {
  let koffi: Koffi;
  try {
    koffi = createRequire(import.meta.url)('koffi') as Koffi;
  } catch (error) {
    return { unavailable: `koffi could not be loaded (${(error as Error).message.split('\n')[0]})` };
  }
  try {
    const trim = koffi.load('libc.so.6').func('int malloc_trim(size_t pad)');
    return { trim: () => void trim(0) };
  } catch (error) {
    return { unavailable: `no glibc malloc_trim (${(error as Error).message.split('\n')[0]})` };
  }
}
