// `npm run admin -- hash-list …`: the embedded known-bad hash lists (HASH_LISTS_FILE), for operators only
// (the API never lists them). An import is all or nothing: a malformed line fails it, named by its
// number, and the list stays as it was. No hash is ever printed: a list's file may be confidential.

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ConfigError, pathSetting } from '../../lib/common/config.ts';
import {
  HASH_LIST_ACTIONS,
  type HashListAction,
  HashListStore,
  LIST_NAME,
} from '../../lib/hash-lists/hash-list-store.ts';
import { ListFileError, parseHashList } from '../../lib/hash-lists/list-file.ts';
import { DEFAULT_MAX_DISTANCE, PDQ_BYTES } from '../../lib/hash-lists/pdq-hex.ts';
import { MAX_INDEX_DISTANCE } from '../../lib/hash-lists/pdq-index.ts';

export const HASH_LIST_HELP = `  hash-list import <name> <file> [--action block|review] [--max-distance <n>]
                                                     replace (or create) a known-bad PDQ hash list: one
                                                     64-hex hash a line, # comments, or a CSV export;
                                                     action default block, max distance default 31
  hash-list ls                                       the lists: name, action, max distance, hashes
  hash-list rm <name>                                remove a list (matching stops within seconds)`;

/** Runs `hash-list <sub> …`; returns the exit code. */
export function runHashListCommand(argv: string[], env: NodeJS.ProcessEnv = process.env): number {
  let values: { action?: string; 'max-distance'?: string; json?: boolean };
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: { action: { type: 'string' }, 'max-distance': { type: 'string' }, json: { type: 'boolean' } },
    }));
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${HASH_LIST_HELP}`);
    return 2;
  }
  const [sub, ...args] = positionals;
  let file: string;
  try {
    file = pathSetting(env, 'HASH_LISTS_FILE');
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`invalid configuration: ${err.message}`);
      return 2;
    }
    throw err;
  }
  const usage = (message: string) => {
    console.error(`${message}\n\n${HASH_LIST_HELP}`);
    return 2;
  };
  const print = (json: unknown, text: string) =>
    console.log(values.json ? JSON.stringify(json, null, 2) : text);

  switch (sub) {
    case 'import': {
      const [name, path] = args;
      if (!name || !path || args.length > 2) return usage('hash-list import needs <name> <file>');
      if (!LIST_NAME.test(name))
        return usage(`invalid list name: lowercase letters, digits, . _ - (${LIST_NAME.source})`);
      const action = (values.action ?? 'block') as HashListAction;
      if (!HASH_LIST_ACTIONS.includes(action)) return usage('--action must be block or review');
      const maxDistance = Number(values['max-distance'] ?? DEFAULT_MAX_DISTANCE);
      if (!Number.isInteger(maxDistance) || maxDistance < 0 || maxDistance > MAX_INDEX_DISTANCE) {
        return usage(`--max-distance must be an integer from 0 to ${MAX_INDEX_DISTANCE}`);
      }
      let text: string;
      try {
        text = readFileSync(path, 'utf8');
      } catch (err) {
        console.error(
          `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
        );
        return 1;
      }
      let hashes: Uint8Array;
      try {
        hashes = parseHashList(text);
      } catch (err) {
        if (err instanceof ListFileError) {
          console.error(`${path}: ${err.message}; list ${name} not changed`);
          return 1;
        }
        throw err;
      }
      const store = new HashListStore(file);
      try {
        store.put(name, action, maxDistance, hashes);
      } finally {
        store.close();
      }
      const count = hashes.length / PDQ_BYTES;
      print(
        { name, action, maxDistance, hashes: count },
        `imported ${count} hash(es) into ${name} (${action}, max distance ${maxDistance})`,
      );
      return 0;
    }
    case 'ls': {
      if (args.length > 0) return usage('hash-list ls takes no arguments');
      const store = new HashListStore(file);
      try {
        const lists = store.list();
        print(
          { lists },
          lists.length === 0
            ? 'no hash lists'
            : lists
                .map(
                  (l) =>
                    `${l.name}\t${l.action}\tmax distance ${l.maxDistance}\t${l.count} hash(es)\timported ${l.importedAt}`,
                )
                .join('\n'),
        );
      } finally {
        store.close();
      }
      return 0;
    }
    case 'rm': {
      const [name] = args;
      if (!name || args.length > 1) return usage('hash-list rm needs <name>');
      const store = new HashListStore(file);
      try {
        if (!store.remove(name)) {
          console.error(`no hash list ${name}`);
          return 1;
        }
      } finally {
        store.close();
      }
      print({ removed: name }, `removed ${name}`);
      return 0;
    }
    default:
      return usage(sub ? `unknown hash-list command ${sub}` : 'hash-list needs a command');
  }
}
