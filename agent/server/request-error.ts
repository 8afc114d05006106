// A client's request refused with an OpenAI-style error: its status, and the `param` and `code` the
// error body names. Its own file so the request seam (exchange.ts) and the parser (bodies/request.ts) share
// it without importing each other.

export class RequestError extends Error {
  readonly status: number;
  readonly param: string | null;
  readonly code: string | null;
  constructor(status: number, message: string, param: string | null = null, code: string | null = null) {
    super(message);
    this.status = status;
    this.param = param;
    this.code = code;
  }
}
