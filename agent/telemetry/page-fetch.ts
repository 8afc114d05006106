// One scrape of one pod's /metrics as an undici dispatch handler: the body's chunks go straight
// from the socket into the page reader, so the page is parsed while it arrives and never exists
// whole (no stream object, no chunk list, no concatenated buffer, no page string). An error body is
// read and dropped so the kept-alive connection stays reusable.
import { createGunzip, type Gunzip } from 'node:zlib';
import type { Dispatcher } from 'undici';
import { describeError } from '../../shared/describe-error.ts';
import type { MetricPage, MetricSelector } from './metric-page.ts';
import { PromTextReader } from './promtext.ts';

/** The scrape's end: a page, or why there is none. Called exactly once, unless cancelled. */
export type PageDone = (result: { page: MetricPage } | { error: string }) => void;

export class PageFetch implements Dispatcher.DispatchHandler {
  readonly #reader: PromTextReader;
  readonly #maxBodyBytes: number;
  readonly #done: PageDone;
  #controller: Dispatcher.DispatchController | undefined;
  #status = 0;
  #bytes = 0;
  #gunzip: Gunzip | undefined;
  #finished = false;

  /** `select`: the samples to keep (the pod's engine adapter's, or every engine's to detect it). */
  constructor(select: MetricSelector, maxBodyBytes: number, done: PageDone) {
    this.#reader = new PromTextReader(select);
    this.#maxBodyBytes = maxBodyBytes;
    this.#done = done;
  }

  /** Ends the scrape now with `error` (a timeout) and drops the connection it was using. */
  fail(error: string): void {
    this.#finish({ error });
    this.#controller?.abort(new Error(error));
  }

  /** Ends the scrape without a result (pod removed, scraper stopped). */
  cancel(): void {
    this.#finished = true;
    this.#gunzip?.destroy();
    this.#controller?.abort(new Error('cancelled'));
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#finished) controller.abort(new Error('cancelled'));
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, unknown>) {
    this.#status = statusCode;
    if (statusCode !== 200) return;
    const encoding = String(headers['content-encoding'] ?? 'identity').toLowerCase();
    if (encoding === 'gzip' || encoding === 'x-gzip') this.#gunzip = this.#gunzipInto();
    else if (encoding !== 'identity') this.fail(`unsupported content-encoding ${encoding}`);
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#finished || this.#status !== 200) return; // an error body is read to its end and dropped
    if (this.#gunzip !== undefined) {
      this.#gunzip.write(chunk);
      return;
    }
    if (this.#count(chunk.length)) this.#reader.write(chunk);
  }

  onResponseEnd(): void {
    if (this.#finished) return;
    if (this.#status !== 200) this.#finish({ error: `HTTP ${this.#status}` });
    else if (this.#gunzip !== undefined) this.#gunzip.end();
    else this.#finish({ page: this.#reader.end() });
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.#finish({ error: describeError(error) });
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
    if ('error' in result) this.#gunzip?.destroy();
    this.#done(result);
  }
}
