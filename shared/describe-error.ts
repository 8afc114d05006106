// One line for anything thrown, for logs and status reports.

/**
 * The error's message, plus the codes (or, for causes, messages) it does not already say: undici
 * hides the socket-level reason (`ECONNREFUSED`) behind "fetch failed", in its cause chain.
 */
export function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  let message = err.message;
  let e = err as { code?: unknown; message?: unknown; cause?: unknown } | undefined;
  for (let depth = 0; e && typeof e === 'object' && depth <= 4; depth++, e = e.cause as typeof e) {
    const detail =
      typeof e.code === 'string' ? e.code : depth > 0 && typeof e.message === 'string' ? e.message : undefined;
    if (detail && !message.includes(detail)) message += ` (${detail})`;
  }
  return message;
}

/** An unexpected error (a bug) for the log: its stack when it has one, since where it came from matters. */
export function describeUnexpected(err: unknown): string {
  return err instanceof Error ? (err.stack ?? `${err.name}: ${err.message}`) : String(err);
}
