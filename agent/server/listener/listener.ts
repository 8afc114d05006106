// The API listener: node:http's server (llhttp, strict: never `insecureHTTPParser`) with its
// bounds and timers taken from the agent's settings, around the API handler (api.ts). node:http
// parses and frames every request; what this file adds is that every refusal, whether llhttp's
// (malformed head or body framing, head too large, a timer fired) or one of the few checks node
// does not make (header count, target length, Host), reaches the client as an OpenAI-shaped error
// body with its status and `connection: close`, not node's bare status line.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { errorBody } from '../../../shared/openai/errors.ts';
import { nodeRequest } from '../exchange.ts';
import type { ApiHandler } from './api.ts';

/** The listener's bounds and timers; every one is an agent setting (`limits.api*`). */
export interface ListenerLimits {
  /** A request head's size at most, request line included (431 past it; node's `maxHeaderSize`). */
  maxHeaderBytes: number;
  /** Header fields per request at most (431 past it). */
  maxHeaders: number;
  /** The request target's length at most (414 past it). */
  maxTargetBytes: number;
  /** From a connection's request start to the end of its head (408 past it; against slowloris). */
  headersTimeoutMs: number;
  /** From a request's start to the end of its body (408 past it); 0: none. */
  requestTimeoutMs: number;
  /** An idle kept-alive connection closes after this long. */
  keepAliveTimeoutMs: number;
  /** Requests one connection may carry before it is closed; 0: no limit. */
  maxRequestsPerSocket: number;
}

// node:http's own defaults (maxHeadersCount 2000), as the listener had before it had settings.
export const DEFAULT_LISTENER_LIMITS: ListenerLimits = {
  maxHeaderBytes: 16 * 1024,
  maxHeaders: 2000,
  maxTargetBytes: 8 * 1024,
  headersTimeoutMs: 60_000,
  requestTimeoutMs: 300_000,
  keepAliveTimeoutMs: 5_000,
  maxRequestsPerSocket: 0,
};

// node:http as its CommonJS module, not an ES import: an ES import of a built-in reads every export
// to build its namespace, and node:http's WebSocket getters then load Node's bundled undici.
const { createServer, STATUS_CODES } = process.getBuiltinModule('node:http');

/** The status a refusal from node:http's parser or timers gets. */
function statusOf(code: string | undefined, reason: string): number {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return 431;
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return 408;
    case 'HPE_UNEXPECTED_CONTENT_LENGTH': // Content-Length with Transfer-Encoding
    case 'HPE_INVALID_TRANSFER_ENCODING':
      return 400;
    case 'HPE_INVALID_VERSION':
      return reason.includes('CRLF') ? 400 : 505;
    case 'HPE_INVALID_METHOD':
      return 501;
    default:
      return 400;
  }
}

/** Often enough that neither timer fires much past its time; once a second at most for the defaults. */
function checkingInterval(l: ListenerLimits): number {
  const shortest = Math.min(l.headersTimeoutMs, l.requestTimeoutMs > 0 ? l.requestTimeoutMs : Infinity);
  return Math.max(10, Math.min(1_000, Math.floor(shortest / 4)));
}

/** A whole error answer as bytes, for a socket that has no response object (the parser refused). */
function refusal(status: number, message: string): string {
  const body = JSON.stringify(errorBody(status, message, { code: 'invalid_http_request' }));
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json\r\n` +
    `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\nx-kinference-route: rejected\r\n\r\n${body}`
  );
}

/** Answers a request the handler must not see with an OpenAI-shaped error, then closes. */
function refuse(res: ServerResponse, status: number, message: string): void {
  const body = JSON.stringify(errorBody(status, message, { code: 'invalid_http_request' }));
  res.shouldKeepAlive = false;
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(body)),
    connection: 'close',
    'x-kinference-route': 'rejected',
  });
  res.end(body);
}

/** Serves `handler` on node:http with `limits`; resolves once listening. */
export function listenApi(
  handler: ApiHandler,
  limits: Partial<ListenerLimits>,
  port: number,
  host: string,
): Promise<Server> {
  const l = { ...DEFAULT_LISTENER_LIMITS, ...limits };
  // Each connection's latest answer: a parser refusal must not be written into one under way.
  const answering = new WeakMap<Socket, ServerResponse>();
  // Connections closing after a refusal: a request pipelined behind it is never served.
  const refused = new WeakSet<Socket>();
  const refuseOn = (socket: Socket, res: ServerResponse, status: number, message: string) => {
    refused.add(socket);
    refuse(res, status, message);
  };
  const server = createServer(
    {
      insecureHTTPParser: false,
      maxHeaderSize: l.maxHeaderBytes,
      headersTimeout: l.headersTimeoutMs,
      requestTimeout: l.requestTimeoutMs,
      keepAliveTimeout: l.keepAliveTimeoutMs,
      // node checks both timers at this interval (30 s by default, which would stretch a short one).
      connectionsCheckingInterval: checkingInterval(l),
      // Checked here, so the refusal is JSON (node answers a bare 400).
      requireHostHeader: false,
      // Every field reaches the request path (and its classifier); none is silently dropped.
      joinDuplicateHeaders: true,
    },
    (incoming: IncomingMessage, res: ServerResponse) => {
      const socket = incoming.socket;
      if (refused.has(socket)) return;
      // The connection's latest answer; one that has finished no longer counts (see clientError).
      answering.set(socket, res);
      // After close() (the drain), a kept-alive connection carries this answer and no more.
      if (!server.listening) res.shouldKeepAlive = false;
      if (incoming.rawHeaders.length / 2 > l.maxHeaders)
        return refuseOn(socket, res, 431, `more than ${l.maxHeaders} header fields`);
      const url = incoming.url ?? '/';
      if (url.length > l.maxTargetBytes)
        return refuseOn(socket, res, 414, `request target over ${l.maxTargetBytes} bytes`);
      // llhttp reads `HTTP/2.0` in a request line as a version like any other.
      if (incoming.httpVersionMajor !== 1)
        return refuseOn(socket, res, 505, `HTTP/${incoming.httpVersion} is not served`);
      if (incoming.httpVersionMinor === 1 && incoming.headers.host === undefined)
        return refuseOn(socket, res, 400, 'an HTTP/1.1 request needs a Host header');
      handler(nodeRequest(incoming), res);
    },
  );
  // Counted by node and checked at its own interval; the hand-off from llhttp is one call.
  server.maxHeadersCount = 0;
  server.maxRequestsPerSocket = l.maxRequestsPerSocket;
  // No tunnels: without this listener node would drop the connection without a word.
  server.on('connect', (_req: IncomingMessage, socket: Socket) => {
    socket.end(refusal(501, 'CONNECT is not served'));
    socket.destroySoon();
  });
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Socket) => {
    const open = answering.get(socket);
    // A reset, or an answer under way (its head sent, not finished): nothing can be said on this connection.
    if (error.code === 'ECONNRESET' || !socket.writable || (open?.headersSent && !open.writableFinished))
      return void socket.destroy();
    const reason = (error as { reason?: string }).reason ?? error.message;
    const status = statusOf(error.code, reason);
    socket.end(refusal(status, `malformed HTTP request: ${reason}`));
    socket.destroySoon();
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}
