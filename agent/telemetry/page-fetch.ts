// One scrape of one pod's /metrics as the sink of its connection's response (scrape-connection.ts):
// the body's bytes go straight from undici's parser into the page reader, so the page is
// parsed while it arrives and never exists whole (no stream object, no chunk list, no
// concatenated buffer, no page string). An error body is read and dropped so the kept-alive
// connection stays reusable.
import { createGunzip, type Gunzip } from 'node:zlib';
import { describeError } from '../../shared/describe-error.ts';
import type { MetricPage, MetricSelector } from './metric-page.ts';
import { PromTextReader } from './promtext.ts';
import type { ResponseSink } from './scrape-connection.ts';

/** The scrape's end: a page (and its size in bytes, decoded), or why there is none. Called exactly once, unless cancelled. */
export type PageDone = (result: { page: MetricPage; bytes: number } | { error: string; status: number }) => void;

export class PageFetch implements ResponseSink {
  readonly #reader: PromTextReader;
  readonly #maxBodyBytes: number;
  readonly #done: PageDone;
  /** Stops the response on its connection (dropping the connection): for when this scrape ends first. */
  readonly #abort: (fetch: PageFetch) => void;
  #status = 0;
  #bytes = 0;
  #compressedBytes = 0;
  #gunzip: Gunzip | undefined;
  #finished = false;

  /** `select`: the samples to keep (the pod's engine adapter's, or every engine's to detect it). */
  constructor(select: MetricSelector, maxBodyBytes: number, done: PageDone, abort: (fetch: PageFetch) => void) {
    this.#reader = new PromTextReader(select);
    this.#maxBodyBytes = maxBodyBytes;
    this.#done = done;
    this.#abort = abort;
  }

  /** Ends the scrape now with `error` (a timeout) and drops the connection it was using. */
  fail(error: string): void {
    // The connection first: the scrape's end may send the next request on it at once.
    this.#abort(this);
    this.#finish({ error });
  }

  /** Ends the scrape without a result (pod removed, scraper stopped). */
  cancel(): void {
    this.#finished = true;
    this.#gunzip?.destroy();
    this.#abort(this);
  }

  head(status: number, contentEncoding: string): void {
    this.#status = status;
    if (status !== 200) return;
    if (contentEncoding === 'gzip' || contentEncoding === 'x-gzip') this.#gunzip = this.#gunzipInto();
    else if (contentEncoding !== 'identity') this.fail(`unsupported content-encoding ${contentEncoding}`);
  }

  data(chunk: Buffer): void {
    if (this.#finished || this.#status !== 200) return; // an error body is read to its end and dropped
    if (this.#gunzip !== undefined) {
      // Compressed bytes have the same limit (a stream that inflates to little must still end),
      // and are copied: zlib reads them later, and the chunk is not the sink's to keep.
      this.#compressedBytes += chunk.length;
      if (this.#compressedBytes > this.#maxBodyBytes) this.fail(`page larger than ${this.#maxBodyBytes} bytes`);
      else this.#gunzip.write(Buffer.from(chunk));
      return;
    }
    if (this.#count(chunk.length)) this.#reader.write(chunk);
  }

  end(): void {
    if (this.#finished) return;
    if (this.#status !== 200) this.#finish({ error: `HTTP ${this.#status}` });
    else if (this.#gunzip !== undefined) this.#gunzip.end();
    else this.#finish({ page: this.#reader.end() });
  }

  error(message: string): void {
    this.#finish({ error: message });
  }

  /** Counts page bytes; past the limit the scrape fails (a page larger than that is an error, not a memory problem). */
  #count(bytes: number): boolean {
    this.#bytes += bytes;
    if (this.#bytes <= this.#maxBodyBytes) return true;
    this.fail(`page larger than ${this.#maxBodyBytes} bytes`);
    return false;
  }

  #gunzipInto(): Gunzip {
    const gunzip = createGunzip();
    gunzip.on('data', (chunk: Buffer) => {
      if (!this.#finished && this.#count(chunk.length)) this.#reader.write(chunk);
    });
    gunzip.on('error', (error) => this.fail(describeError(error)));
    gunzip.on('end', () => this.#finish({ page: this.#reader.end() }));
    return gunzip;
  }

  #finish(result: { page: MetricPage } | { error: string }): void {
    if (this.#finished) return;
    this.#finished = true;
    if ('error' in result) {
      this.#gunzip?.destroy();
      this.#done({ error: result.error, status: this.#status });
    } else this.#done({ page: result.page, bytes: this.#bytes });
  }
}
