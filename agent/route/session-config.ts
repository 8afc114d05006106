// Session affinity's part of the agent's config file: its schema, its defaults and its settings
// (agent/config assembles the file; agent/server/request-path/sessions.ts runs it, session.ts decides with it).
import { Type, type Static } from '@sinclair/typebox';
import { parseDuration } from '../../shared/duration.ts';
import { DurationString, Name } from '../../shared/config-schema.ts';
import type { SessionSettings } from '../types.ts';

/** Session affinity: keep a session on the pod that served it while that pod stays within the SLO. */
export const SessionsConfig = Type.Object(
  {
    /** Header carrying the session id (default x-session-id). */
    header: Type.Optional(Name),
    /** Without the header, use the body's `user` or `metadata.user_id` (default true). */
    fromBody: Type.Optional(Type.Boolean()),
    /** Sessions remembered at most (least recently used forgotten first; default 100,000). */
    maxSessions: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
    /** A session not seen for this long is forgotten (default 10m). */
    ttl: Type.Optional(DurationString),
  },
  { additionalProperties: false },
);

/** Session affinity's settings: the file's, else the defaults. */
export function sessionSettings(file: Static<typeof SessionsConfig>): SessionSettings {
  return {
    header: (file.header ?? 'x-session-id').toLowerCase(),
    fromBody: file.fromBody ?? true,
    maxSessions: file.maxSessions ?? 100_000,
    ttlMs: file.ttl ? parseDuration(file.ttl) : 600_000,
  };
}
