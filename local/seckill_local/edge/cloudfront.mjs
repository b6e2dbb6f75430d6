// Runs a CloudFront Function (cloudfront-js-2.0) in Node.js: its `import cf from
// 'cloudfront'` line is dropped and `cf` is handed in, with a kvs() that reads
// an in-memory store (any object with get(key) -> string | undefined).
import { readFileSync } from 'node:fs';

const IMPORT = /^\s*import\s+cf\s+from\s+['"]cloudfront['"]\s*;?\s*$/m;

// The KeyValueStore handle a function gets from cf.kvs(): get() rejects for a
// missing key, as CloudFront's does, and parses on format 'json'.
export function kvsHandle(store) {
  const read = (key) => {
    const value = store.get(String(key));
    if (value === undefined) throw new Error(`Key ${key} not found`);
    return value;
  };
  return {
    async get(key, options) {
      const value = read(key);
      const format = options?.format ?? 'string';
      if (format === 'json') return JSON.parse(value);
      if (format === 'bytes') return new TextEncoder().encode(value);
      return value;
    },
    async exists(key) {
      return store.get(String(key)) !== undefined;
    },
  };
}

export function loadFunction(path, kvs) {
  const source = readFileSync(path, 'utf8').replace(IMPORT, '');
  const cf = { kvs: () => kvsHandle(kvs) };
  // The function's own file, evaluated once with `cf` in scope; it defines handler.
  const handler = new Function('cf', `${source}\nreturn handler;`)(cf);
  if (typeof handler !== 'function') throw new Error(`${path} defines no handler function`);
  return handler;
}
