// The edge on this machine: the distribution's cache behaviors and their CloudFront
// Functions in front of the local API, and an in-memory stand-in of the KeyValueStore the
// functions read, with the cloudfront-keyvaluestore REST API (botocore's 2022-07-26 model)
// that the publisher writes through.
//
//   node server.mjs --distribution '{"behaviors": [...], "functions": {...}}' \
//        --upstream http://127.0.0.1:3000 --port 8080 --kvs-port 8081 \
//        --kvs-arn arn:aws:cloudfront::000000000000:key-value-store/x
//
// --distribution is what seckill_local.edge.distribution() reads from edge/template.yaml: the
// behaviors in order ({pathPattern, allowedMethods, function, static, headers}, the default's
// pattern "*" last) and each function's code by name. A behavior with `static` (a directory)
// stands for an S3 origin: its files are served from there; `headers` are its response
// headers policy's, added to every answer of the behavior.
// Port 0 picks a free port; the ready line names the ports bound. --exit-with-stdin ends
// the server when its stdin closes: a parent that dies, even by SIGKILL, takes it along.
import http from 'node:http';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { extname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { compileFunction, mapStore } from './cloudfront.mjs';
import { behaviorFor } from './distribution.mjs';

const { values: args } = parseArgs({
  options: {
    distribution: { type: 'string' },
    upstream: { type: 'string' },
    port: { type: 'string', default: '0' },
    'kvs-port': { type: 'string', default: '0' },
    'kvs-arn': { type: 'string' },
    host: { type: 'string', default: '127.0.0.1' },
    'exit-with-stdin': { type: 'boolean', default: false },
  },
});
// Set by seckill-local start-api --edge: the secret the local API's authorizer requires.
const ORIGIN_SECRET = process.env.SECKILL_ORIGIN_SECRET ?? '';
for (const name of ['distribution', 'upstream', 'kvs-arn']) {
  if (!args[name]) {
    console.error(`server.mjs: --${name} is required`);
    process.exit(2);
  }
}

// CloudFront's documented sizes (kvs-with-functions-create-s3-kvp.html): a key of 512,
// a value of 1,024 (characters there, bytes here: the same for ASCII), a store of 5 MB.
const MAX_KEY_BYTES = 512;
const MAX_VALUE_BYTES = 1024;
const MAX_STORE_BYTES = 5 * 1024 * 1024;
const MAX_LIST = 50; // ListKeys' MaxResults, at most (the model's bound)

// ---- The store -------------------------------------------------------------

const store = {
  arn: args['kvs-arn'],
  items: new Map(),
  bytes: 0,
  etag: newEtag(),
  created: Date.now() / 1000,
  modified: Date.now() / 1000,
};

function newEtag() {
  return `ET${randomBytes(6).toString('hex').toUpperCase()}`;
}

function size(key, value) {
  return Buffer.byteLength(key) + Buffer.byteLength(value);
}

class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

const validation = (message) => new ApiError(400, 'ValidationException', message);

function checkKey(key) {
  const bytes = Buffer.byteLength(key);
  if (bytes < 1 || bytes > MAX_KEY_BYTES) throw validation(`Key must be 1 to ${MAX_KEY_BYTES} bytes, is ${bytes}`);
}

function checkValue(value) {
  if (typeof value !== 'string') throw validation('Value is required');
  const bytes = Buffer.byteLength(value);
  if (bytes > MAX_VALUE_BYTES) throw validation(`Value must be at most ${MAX_VALUE_BYTES} bytes, is ${bytes}`);
}

function checkEtag(ifMatch) {
  if (!ifMatch) throw validation('If-Match is required');
  if (ifMatch !== store.etag) {
    throw new ApiError(409, 'ConflictException', 'Pre-Condition failed: the ETag does not match the store');
  }
}

// Puts and deletes applied together or not at all; one new ETag for the write.
function write(puts, deletes) {
  let bytes = store.bytes;
  for (const key of deletes) {
    if (!store.items.has(key)) throw new ApiError(404, 'ResourceNotFoundException', `Key ${key} not found`);
    bytes -= size(key, store.items.get(key));
  }
  for (const { Key: key, Value: value } of puts) {
    checkKey(key);
    checkValue(value);
    const old = store.items.get(key);
    bytes += size(key, value) - (old === undefined ? 0 : size(key, old));
  }
  if (bytes > MAX_STORE_BYTES) {
    throw new ApiError(402, 'ServiceQuotaExceededException', `The store would hold ${bytes} bytes, over ${MAX_STORE_BYTES}`);
  }
  for (const key of deletes) store.items.delete(key);
  for (const { Key: key, Value: value } of puts) store.items.set(key, value);
  store.bytes = bytes;
  store.etag = newEtag();
  store.modified = Date.now() / 1000;
  return [200, { ItemCount: store.items.size, TotalSizeInBytes: store.bytes }, { ETag: store.etag }];
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function jsonBody(raw) {
  if (raw.length === 0) return {};
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch {
    throw new ApiError(400, 'ValidationException', 'The request body is not JSON');
  }
}

// One operation of the API: [status, body, headers].
async function kvsOperation(req) {
  const url = new URL(req.url, 'http://kvs');
  const parts = url.pathname.split('/').slice(1).map(decodeURIComponent);
  if (parts[0] !== 'key-value-stores' || parts.length < 2 || parts.length > 4 || (parts.length > 2 && parts[2] !== 'keys')) {
    throw new ApiError(404, 'ResourceNotFoundException', `No operation at ${url.pathname}`);
  }
  if (!req.headers.authorization) throw new ApiError(403, 'AccessDeniedException', 'The request is not signed');
  if (parts[1] !== store.arn) throw new ApiError(404, 'ResourceNotFoundException', `No key value store ${parts[1]}`);
  const body = jsonBody(await readBody(req));
  const key = parts[3];
  const counts = { ItemCount: store.items.size, TotalSizeInBytes: store.bytes };
  const route = `${req.method} ${parts.length === 2 ? 'store' : key === undefined ? 'keys' : 'key'}`;
  switch (route) {
    case 'GET store': // DescribeKeyValueStore
      return [
        200,
        { ...counts, KvsARN: store.arn, Created: store.created, LastModified: store.modified, Status: 'READY' },
        { ETag: store.etag },
      ];
    case 'GET key': {
      // GetKey
      const value = store.items.get(key);
      if (value === undefined) throw new ApiError(404, 'ResourceNotFoundException', `Key ${key} not found`);
      return [200, { Key: key, Value: value, ...counts }, {}];
    }
    case 'PUT key': // PutKey
      checkEtag(req.headers['if-match']);
      return write([{ Key: key, Value: body.Value }], []);
    case 'DELETE key': // DeleteKey
      checkEtag(req.headers['if-match']);
      return write([], [key]);
    case 'POST keys': // UpdateKeys
      checkEtag(req.headers['if-match']);
      return write(body.Puts ?? [], (body.Deletes ?? []).map((item) => item.Key));
    case 'GET keys': {
      // ListKeys: in key order; the token is the offset of the next page.
      const max = Number(url.searchParams.get('MaxResults') ?? MAX_LIST);
      if (!Number.isInteger(max) || max < 1 || max > MAX_LIST) throw validation(`MaxResults must be 1 to ${MAX_LIST}`);
      const start = Number(url.searchParams.get('NextToken') ?? 0);
      if (!Number.isInteger(start) || start < 0) throw validation('NextToken is not one this store gave');
      const keys = [...store.items.keys()].sort();
      const page = keys.slice(start, start + max).map((k) => ({ Key: k, Value: store.items.get(k) }));
      const next = start + max < keys.length ? { NextToken: String(start + max) } : {};
      return [200, { Items: page, ...next }, {}];
    }
    default:
      throw new ApiError(405, 'ValidationException', `No operation ${route}`);
  }
}

function send(res, status, headers, body) {
  res.writeHead(status, { 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

const stats = { answered: 0, forwarded: 0, failed: 0 };

const kvsServer = http.createServer(async (req, res) => {
  if (req.method === 'GET' && req.url === '/__edge/stats') {
    send(res, 200, { 'content-type': 'application/json' }, JSON.stringify(stats));
    return;
  }
  const requestId = randomUUID();
  try {
    const [status, body, headers] = await kvsOperation(req);
    send(res, status, { 'content-type': 'application/json', 'x-amzn-requestid': requestId, ...headers }, JSON.stringify(body));
  } catch (error) {
    if (!(error instanceof ApiError)) {
      console.error('kvs:', error);
      error = new ApiError(500, 'InternalServerException', 'The key value store failed');
    }
    // The error shape botocore's rest-json parser reads: the type in the header and __type.
    send(
      res,
      error.status,
      { 'content-type': 'application/json', 'x-amzn-errortype': error.type, 'x-amzn-requestid': requestId },
      JSON.stringify({ __type: error.type, Message: error.message }),
    );
  }
});

// ---- The viewer side -------------------------------------------------------

const distribution = JSON.parse(args.distribution);
const kvs = mapStore(store.items);
const functions = new Map(
  Object.entries(distribution.functions).map(([name, code]) => [name, compileFunction(code, kvs)]),
);
const upstream = new URL(args.upstream);
const agent = new http.Agent({ keepAlive: true });
// Hop-by-hop headers (RFC 9110 7.6.1) belong to one connection, not to the request.
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade']);

// The request target's path and query as sent: no URL parser, which would resolve dot
// segments that CloudFront passes on (distribution.mjs).
function splitTarget(target) {
  const at = target.indexOf('?');
  return at < 0 ? [target, ''] : [target.slice(0, at), target.slice(at + 1)];
}

// Every map a viewer names the keys of has no prototype: a header, parameter or cookie
// called __proto__ is one more entry, not a write to Object.prototype.
const entries = () => Object.create(null);

function viewerRequest(req, uri, search) {
  const querystring = entries();
  // Values as they came on the wire, as CloudFront hands them to a function.
  for (const pair of search.split('&').filter(Boolean)) {
    const at = pair.indexOf('=');
    const [name, value] = at < 0 ? [pair, ''] : [pair.slice(0, at), pair.slice(at + 1)];
    add(querystring, name, value);
  }
  const headers = entries();
  const cookies = entries();
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i].toLowerCase();
    const value = req.rawHeaders[i + 1];
    if (name === 'cookie') {
      for (const cookie of value.split(';')) {
        const at = cookie.indexOf('=');
        if (at > 0) add(cookies, cookie.slice(0, at).trim(), cookie.slice(at + 1).trim());
      }
    } else if (!HOP.has(name)) {
      add(headers, name, value);
    }
  }
  return { method: req.method, uri, querystring, headers, cookies };
}

// Repeated names: the first value, and all of them in multiValue (CloudFront's shape).
function add(into, name, value) {
  const entry = into[name];
  if (entry === undefined) into[name] = { value };
  else (entry.multiValue ??= [{ value: entry.value }]).push({ value });
}

function values(entry) {
  return (entry.multiValue ?? [entry]).map((item) => item.value);
}

// The viewer's body is read whole (a press's is empty or small) so that a request sent on a
// kept-alive connection the upstream had just closed can be sent again: it never reached it.
async function forward(req, res, request) {
  const query = Object.entries(request.querystring ?? {}).flatMap(([name, entry]) =>
    values(entry).map((value) => (value === '' ? name : `${name}=${value}`)),
  );
  const headers = entries();
  for (const [name, entry] of Object.entries(request.headers ?? {})) headers[name] = values(entry).join(', ');
  const cookies = Object.entries(request.cookies ?? {}).flatMap(([name, entry]) => values(entry).map((v) => `${name}=${v}`));
  if (cookies.length) headers.cookie = cookies.join('; ');
  headers.host = upstream.host;
  // CloudFront's origin custom header, which replaces any the viewer sent (seckill.origin).
  if (ORIGIN_SECRET) headers['x-seckill-origin'] = ORIGIN_SECRET;
  // CloudFront appends the viewer's address, as a proxy does ("Client IP addresses" in
  // docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/RequestAndResponseBehaviorCustomOrigin.html).
  const viewer = req.socket.remoteAddress;
  headers['x-forwarded-for'] = headers['x-forwarded-for'] ? `${headers['x-forwarded-for']}, ${viewer}` : viewer;
  const body = await readBody(req);
  if (body.length > 0 || 'content-length' in headers) headers['content-length'] = String(body.length);
  const options = {
    host: upstream.hostname,
    port: upstream.port,
    method: req.method,
    path: request.uri + (query.length ? `?${query.join('&')}` : ''),
    headers,
    agent,
  };
  const attempt = (retry) => {
    const out = http.request(options, (answer) => {
      const back = entries();
      for (const [name, value] of Object.entries(answer.headers)) if (!HOP.has(name)) back[name] = value;
      res.writeHead(answer.statusCode, back);
      answer.pipe(res);
    });
    out.on('error', (error) => {
      if (retry && out.reusedSocket && error.code === 'ECONNRESET') return attempt(false);
      console.error('upstream:', error.message);
      if (!res.headersSent) send(res, 502, { 'content-type': 'text/plain' }, 'Bad Gateway');
      else res.destroy();
    });
    out.end(body);
  };
  attempt(true);
}

function answer(req, res, response) {
  const headers = entries();
  for (const [name, entry] of Object.entries(response.headers ?? {})) headers[name] = values(entry);
  const cookies = Object.entries(response.cookies ?? {}).map(([name, entry]) => `${name}=${entry.value}`);
  if (cookies.length) headers['set-cookie'] = cookies;
  let body = response.body ?? '';
  if (typeof body === 'object') body = Buffer.from(body.data, body.encoding === 'base64' ? 'base64' : 'utf8');
  req.resume(); // the body nobody reads, drained so the connection stays usable
  send(res, response.statusCode, headers, body);
}

// ---- The S3 origin: the bucket's keys are the files under `root` ----------------------

// The Content-Type `aws s3 sync` stores with each file (by its extension).
const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.png': 'image/png',
  '.svg': 'image/svg+xml',
};

// CloudFront sends the raw path on (distribution.mjs); S3's key is that path decoded. The
// bucket holds files only, one per key: a key with an empty, '.' or '..' segment names none.
// A key the bucket does not hold is S3's 403 AccessDenied: CloudFront may only GetObject,
// and without s3:ListBucket S3 answers a missing key 403, not 404.
async function serveStatic(req, res, root, uri, headers) {
  req.resume();
  let body = null;
  try {
    const segments = decodeURIComponent(uri).slice(1).split('/');
    if (!segments.some((part) => ['', '.', '..'].includes(part) || /[\\\0]/.test(part))) {
      const file = join(root, ...segments);
      if ((await stat(file)).isFile()) body = await readFile(file);
    }
  } catch {
    body = null; // no such key (or no key at all: a malformed escape)
  }
  if (body === null) {
    const denied = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>';
    send(res, 403, { 'content-type': 'application/xml', ...headers }, denied);
    return;
  }
  const type = TYPES[extname(uri)] ?? 'application/octet-stream';
  res.writeHead(200, { 'content-type': type, 'content-length': body.length, ...headers });
  res.end(req.method === 'HEAD' ? undefined : body);
}

// CloudFront's own refusal of a method the behavior does not allow: 403 "Invalid method"
// (docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/http-403-invalid-method.html).
function refuseMethod(req, res) {
  req.resume();
  send(res, 403, { 'content-type': 'text/html' }, '403 ERROR: the request could not be satisfied (invalid method)');
}

const viewerServer = http.createServer(async (req, res) => {
  const [uri, search] = splitTarget(req.url);
  const behavior = behaviorFor(distribution.behaviors, uri);
  if (!behavior.allowedMethods.includes(req.method)) {
    refuseMethod(req, res);
    return;
  }
  if (behavior.static) {
    serveStatic(req, res, behavior.static, uri, behavior.headers).catch(() => res.destroy());
    return;
  }
  const event = {
    version: '1.0',
    context: {
      distributionDomainName: req.headers.host ?? 'localhost',
      distributionId: 'LOCAL',
      eventType: 'viewer-request',
      requestId: randomUUID(),
    },
    viewer: { ip: req.socket.remoteAddress },
    request: viewerRequest(req, uri, search),
  };
  const handler = behavior.function ? functions.get(behavior.function) : (e) => e.request;
  let result;
  try {
    result = await handler(event);
  } catch (error) {
    // CloudFront answers 503 when a function fails.
    stats.failed += 1;
    console.error('function:', error);
    req.resume();
    send(res, 503, { 'content-type': 'text/plain' }, 'The CloudFront function failed');
    return;
  }
  if (result && typeof result.statusCode === 'number') {
    stats.answered += 1;
    answer(req, res, result);
  } else {
    stats.forwarded += 1;
    forward(req, res, result ?? event.request).catch(() => res.destroy()); // the viewer went away
  }
});

// The demo's presses come in thousands over kept-alive connections.
for (const server of [viewerServer, kvsServer]) server.keepAliveTimeout = 65_000;

function listen(server, port) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(port), args.host, () => resolve(server.address().port));
  });
}

const viewerPort = await listen(viewerServer, args.port);
const kvsPort = await listen(kvsServer, args['kvs-port']);
console.log(`edge listening on http://${args.host}:${viewerPort} (kvs http://${args.host}:${kvsPort})`);

function stop() {
  viewerServer.close();
  kvsServer.close();
  agent.destroy();
  process.exit(0);
}
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, stop);
if (args['exit-with-stdin']) {
  process.stdin.on('end', stop);
  process.stdin.resume();
}
