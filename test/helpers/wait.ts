// The one polling helper for tests: wait until a condition holds, or fail saying what was awaited.

/**
 * Polls `check` every `everyMs` until it holds and resolves with the ms it took; after `timeoutMs`
 * fails with `what` (a function is called then, so it can describe the state at the failure).
 */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string | (() => string),
  everyMs = 10,
): Promise<number> {
  const start = performance.now();
  for (;;) {
    if (await check()) return performance.now() - start;
    if (performance.now() - start > timeoutMs) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
