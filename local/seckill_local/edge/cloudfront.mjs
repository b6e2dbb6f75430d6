// Runs edge/press.js under Node.js as CloudFront Functions would: the very file that is
// deployed, its one `import cf from 'cloudfront'` replaced by a stand-in `cf` whose
// kvs() is the store given here, and its `import crypto from 'crypto'` (if any) by
// Node's, whose createHash/createHmac the runtime's crypto module follows. Shared by
// the unit tests and the local edge server.
import crypto from 'node:crypto';
import { readFileSync } from 'node:fs';

const IMPORT = /^import cf from 'cloudfront';[ \t]*$/m;
const CRYPTO = /^import crypto from 'crypto';[ \t]*$/m;

// The function's `async function handler(event)`. `kvs` has the runtime's async
// get(key, {format}) and exists(key); `now` (optional) stands in for Date.now, so a
// test can set the clock. The runtime runs functions in strict mode, so does this.
export function loadFunction(path, kvs, { now } = {}) {
  const source = readFileSync(path, 'utf8');
  if (source.match(new RegExp(IMPORT.source, 'gm'))?.length !== 1) {
    throw new Error(`${path}: expected exactly one line "import cf from 'cloudfront';"`);
  }
  const cf = { kvs: () => kvs };
  const clock = now ? { now } : Date;
  const body = `'use strict';\n${source.replace(IMPORT, '').replace(CRYPTO, '')}\nreturn handler;`;
  return new Function('cf', 'crypto', 'Date', body)(cf, crypto, clock);
}

// A key value store held in a Map of key -> value (a string, as the store keeps it).
// get() throws for a missing key, as the runtime's does.
export function mapStore(entries = new Map()) {
  return {
    entries,
    async get(key, { format = 'string' } = {}) {
      if (!entries.has(key)) {
        throw new Error(`key not found: ${key}`);
      }
      const value = entries.get(key);
      if (format === 'json') {
        return JSON.parse(value);
      }
      if (format === 'bytes') {
        return Buffer.from(value, 'utf8');
      }
      return value;
    },
    async exists(key) {
      return entries.has(key);
    },
  };
}
