// Watches the mounted policy file (POLICY_FILE). Kubernetes updates a ConfigMap volume by writing a new
// timestamped directory and swapping the `..data` symlink atomically, so the file's own inode never
// changes in place: the directory is watched (any event re-reads) and a slow poll covers missed events.
// Each read is parsed whole; an invalid file keeps the last good policy and is logged. Readers take
// `current()` once per request, so a request in flight keeps the policy it started with.

import { type FSWatcher, readFileSync, watch } from 'node:fs';
import { dirname } from 'node:path';
import { type PolicyDocument, parsePolicy } from './policy-file.ts';

export interface PolicyLogger {
  info(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export class PolicyWatch {
  #current: PolicyDocument | undefined;
  #text = '';
  readonly #watcher: FSWatcher | undefined;
  readonly #timer: NodeJS.Timeout;

  constructor(
    readonly path: string,
    readonly log: PolicyLogger,
    pollMs = 1_000,
  ) {
    this.reload();
    try {
      this.#watcher = watch(dirname(path), () => this.reload());
      this.#watcher.on('error', (err) =>
        this.log.error({ err, path }, `policy directory watch failed; reading the file every ${pollMs} ms`),
      );
    } catch (err) {
      // The poll below still applies changes, only later.
      this.log.error({ err, path }, `policy directory not watchable; reading the file every ${pollMs} ms`);
      this.#watcher = undefined;
    }
    this.#timer = setInterval(() => this.reload(), pollMs);
    this.#timer.unref();
  }

  /** The policy in force, or undefined until a valid file was read (the configuration applies). */
  current(): PolicyDocument | undefined {
    return this.#current;
  }

  reload(): void {
    let text: string;
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (err) {
      if (this.#text !== '<unreadable>') {
        // No file and no policy yet: the state before the operator has rendered one, not a fault.
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' && !this.#current)
          this.log.info({ path: this.path }, 'no policy file yet; the configuration applies');
        else this.log.error({ err, path: this.path }, 'policy file unreadable; keeping the last good policy');
      }
      this.#text = '<unreadable>';
      return;
    }
    if (text === this.#text) return;
    this.#text = text;
    try {
      this.#current = parsePolicy(text);
      this.log.info({ path: this.path, source: this.#current.source }, 'policy applied');
    } catch (err) {
      this.log.error(
        { err: (err as Error).message, path: this.path },
        'policy file invalid; keeping the last good policy',
      );
    }
  }

  close(): void {
    this.#watcher?.close();
    clearInterval(this.#timer);
  }
}
