'use strict';
// groundeval's FHIR R4 server: Medplum's FHIR router (@medplum/fhir-router) over one
// in-memory repository per case, on 127.0.0.1. This is its source: what runs is
// server.bundle.js, this file with its npm dependencies and Medplum's R4 definitions in one
// file (scripts/build_fhir_server.py builds it from package-lock.json with build.mjs).
//
//   node server.bundle.js     its configuration is the first line of its stdin (JSON), never its
//                             environment, command line or a file (another process of the same
//                             user reads those: /proc/<pid>/environ, cmdline):
//     { "token": "...",       required header x-groundeval-control on every /_control/ call
//       "bindings": { "ServiceRequest": { "status": [...], "intent": [...] }, ... },
//       "write_cap": 20,      default writes a case may make (a case's own cap overrides it)
//       "max_log_bytes": N,   bytes of request and response bodies a case's log keeps; the requests
//                             beyond are counted, not kept (requests_cut: the harness makes
//                             such a case an error, never scores it on the partial log)
//       "max_body_bytes": N,  the largest request body it reads (413 beyond)
//       "port": 0 }
//
// When ready it prints one line on stdout: {"port": N}. It exits when its stdin closes (the
// process that started it is gone), on SIGTERM/SIGINT, or on POST /_control/shutdown.
//
// Control (harness only, token required):
//   POST   /_control/cases            {token, bundle, key?, clock?, write_cap?} -> {id, base_path, seeded, state}
//   GET    /_control/cases/<id>/activity                   -> {requests, requests_cut, state}
//   POST   /_control/cases/<id>/close                      -> the same, and the repository dropped
//   DELETE /_control/cases/<id>                             -> {dropped: true}
//   GET    /_control/refused                                -> {refused: [...], count: N}
//   GET    /_control/health                                 -> {ok: true, cases: N}
// FHIR (the agent):  /case/<token>/fhir/R4/<interaction>. A case's token (256 random bits, made
// by the harness for this opening of the case and handed to its agent alone, in its base URL)
// is the only way to its repository: any other path is refused (404) and logged (/_control/refused).

const http = require('node:http');
const crypto = require('node:crypto');
const core = require('@medplum/core');
// Medplum's FHIR R4 definitions as JSON texts, inlined at build time (build.mjs):
// { types, searchParameters, resources: { <resource type>: its StructureDefinition } }
const definitions = require('groundeval-fhir-definitions');
const { FhirRouter, MemoryRepository } = require('@medplum/fhir-router');
const { applyPatch } = require('rfc6902');

const fs = require('node:fs');

// The configuration: stdin's first line, read before anything listens.
function readConfig() {
  const buf = Buffer.alloc(1 << 16);
  let text = '';
  while (!text.includes('\n')) {
    let n;
    try {
      n = fs.readSync(0, buf, 0, buf.length, null);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10); // a non-blocking pipe: wait a little
      continue;
    }
    if (n === 0) break;
    text += buf.toString('utf8', 0, n);
  }
  return JSON.parse(text.split('\n')[0] || '{}');
}

const config = readConfig();
const TOKEN = config.token || '';
if (!/^[0-9a-f]{32,}$/.test(TOKEN)) {
  process.stderr.write('groundeval fhir server: no control token on stdin\n');
  process.exit(2);
}
const BINDINGS = config.bindings || {};
const DEFAULT_CAP = Number.isInteger(config.write_cap) ? config.write_cap : 50;
// the log is bounded by what it holds, not by how many requests it counts: many small requests
// are kept whole, and a few huge ones cannot exhaust memory
const MAX_LOG_BYTES = Number.isInteger(config.max_log_bytes) ? config.max_log_bytes : 32 * 1024 * 1024;
const MAX_BODY = Number.isInteger(config.max_body_bytes) ? config.max_body_bytes : 16 * 1024 * 1024;
const CASE_TOKEN = /^[0-9a-f]{64}$/;
const FHIR_JSON = 'application/fhir+json; charset=utf-8';

// Medplum's searches need the search parameters and the structure definitions of the types
// they read (a token search on an Identifier, say). Parsing every resource type's definition
// would slow each start, so a type's is parsed and indexed the first time a request names it.
core.indexStructureDefinitionBundle(JSON.parse(definitions.types));
core.indexSearchParameterBundle(JSON.parse(definitions.searchParameters));
const indexed = new Set();

function ensureType(type) {
  if (typeof type !== 'string' || indexed.has(type) || !Object.hasOwn(definitions.resources, type)) return;
  indexed.add(type);
  core.indexStructureDefinitionBundle([JSON.parse(definitions.resources[type])]);
}
['Resource', 'DomainResource', 'Bundle', 'OperationOutcome', 'Patient'].forEach(ensureType);

// every resource type a request names: its path, its body (a bundle's entries), chained or
// included types in its query
function ensureTypesOf(segments, body, search) {
  ensureType(segments[0]);
  const visit = (r) => {
    if (r && typeof r === 'object' && typeof r.resourceType === 'string') ensureType(r.resourceType);
  };
  visit(body);
  if (body && Array.isArray(body.entry)) {
    for (const e of body.entry) {
      visit(e && e.resource);
      if (e && e.request && typeof e.request.url === 'string') ensureType(e.request.url.split(/[/?]/)[0]);
    }
  }
  for (const m of String(search || '').matchAll(/[A-Z][A-Za-z]+/g)) ensureType(m[0]);
}

const router = new FhirRouter();
const cases = new Map(); // id -> {repo, log, cut, writes, cap, token}

// A case's repository: ids and meta.lastUpdated from the case itself (its key and a logical
// clock), never from the wall clock or a random source, so the same requests give the same
// responses run after run (a model-call cache replays a case exactly).
class CaseRepository extends MemoryRepository {
  constructor(key, clock) {
    super();
    this.key = key;
    this.counter = 0;
    this.clock = Date.parse(clock || '2000-01-01T00:00:00Z') || 946684800000;
    this.ticks = 0;
  }

  generateId() {
    this.counter += 1;
    const h = crypto.createHash('sha256').update(`${this.key}:${this.counter}`).digest('hex');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
  }

  stamp(out) {
    this.ticks += 1;
    const when = new Date(this.clock + this.ticks * 1000).toISOString();
    const version = this.generateId();
    const stored = this.resources.get(out.resourceType)?.get(out.id);
    for (const r of [stored, out, ...(this.history.get(out.resourceType)?.get(out.id)?.slice(-1) ?? [])]) {
      if (r && r.meta) {
        r.meta.lastUpdated = when;
        r.meta.versionId = version;
      }
    }
    return out;
  }

  async createResource(resource, options) {
    return this.stamp(await super.createResource(resource, options));
  }

  async updateResource(resource, options) {
    return this.stamp(await super.updateResource(resource, options));
  }
}

function outcome(code, text, expression) {
  const issue = { severity: 'error', code, details: { text } };
  if (expression) issue.expression = [expression];
  return { resourceType: 'OperationOutcome', issue: [issue] };
}

function send(res, status, body, type = FHIR_JSON) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => { // past the limit: read to its end (so it can be answered), not kept
      size += c.length;
      if (size <= MAX_BODY) chunks.push(c);
    });
    req.on('end', () => {
      if (size > MAX_BODY) {
        reject(new Error(`the request body is ${size} bytes, over this server's limit of ${MAX_BODY} bytes`));
      } else resolve(Buffer.concat(chunks).toString('utf8'));
    });
    req.on('error', reject);
  });
}

// -- state: every resource a case's repository holds ------------------------------------
function dump(repo) {
  // MemoryRepository keeps resourceType -> (id -> resource); reading it is the only way to
  // list every resource without one search per resource type.
  const state = {};
  for (const [type, byId] of repo.resources) {
    for (const [id, resource] of byId) state[`${type}/${id}`] = resource;
  }
  return state;
}

// -- required-binding status checks ----------------------------------------------------
function bindingProblem(resource) {
  if (!resource || typeof resource !== 'object') return null;
  const rules = BINDINGS[resource.resourceType];
  if (!rules) return null;
  for (const [element, allowed] of Object.entries(rules)) {
    const value = resource[element];
    const where = `${resource.resourceType}.${element}`;
    if (value === undefined || value === null) {
      return [where, `${where} is required (1..1, required binding: ${allowed.join(' | ')})`];
    }
    if (typeof value !== 'string' || !allowed.includes(value)) {
      return [where, `${where} ${JSON.stringify(value)} is not in the R4 required binding (${allowed.join(' | ')})`];
    }
  }
  return null;
}

// What a request writes, for the write cap and the binding checks: [{method, type, id, resource}]
function writesOf(method, segments, body) {
  if (method === 'GET' || method === 'HEAD') {
    return [];
  }
  if (method === 'POST' && segments.length === 0) { // batch / transaction
    const entries = (body && Array.isArray(body.entry)) ? body.entry : [];
    return entries
      .filter((e) => e && e.request && e.request.method && e.request.method.toUpperCase() !== 'GET')
      .map((e) => {
        const url = String(e.request.url || '').split('?')[0].split('/').filter(Boolean);
        return { method: e.request.method.toUpperCase(), type: url[0], id: url[1], resource: e.resource };
      });
  }
  if (method === 'POST' && segments[segments.length - 1] === '_search') return [];
  if (method === 'POST' && segments[0] && segments[0].startsWith('$')) return [];
  return [{ method, type: segments[0], id: segments[1], resource: method === 'PATCH' ? undefined : body }];
}

function graphqlMutation(body) {
  const query = body && typeof body === 'object' ? body.query : body;
  return typeof query !== 'string' || /\bmutation\b/.test(query);
}

async function patchedProblem(repo, type, id, patch) {
  if (!BINDINGS[type] || !id || !Array.isArray(patch)) return null;
  let current;
  try {
    current = await repo.readResource(type, id);
  } catch {
    return null; // the router answers the missing resource itself
  }
  const after = core.deepClone(current);
  applyPatch(after, patch);
  return bindingProblem(after);
}

// Medplum matches a reference search only on "Type/id": a bare id finds nothing. The patient
// compartment's parameters with a bare id are read as Patient/<id> (the log keeps the request
// as the agent sent it).
const PATIENT_PARAMS = new Set(['patient', 'subject', 'subject:Patient', 'patient:Patient']);
function fhirUrl(rest, search) {
  const params = new URLSearchParams(search);
  for (const [key, value] of [...params]) {
    if (PATIENT_PARAMS.has(key) && value && !value.includes('/') && !value.includes(',')) {
      params.delete(key);
      params.append(key.split(':')[0], `Patient/${value}`);
    }
  }
  const q = params.toString();
  return `/${rest}${q ? `?${q}` : ''}`;
}

// -- one FHIR request of a case -----------------------------------------------------------
async function fhir(c, method, rest, search, text, headers) {
  const path = rest + (search || '');
  let body;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch (e) {
      return [400, outcome('structure', `the request body is not JSON: ${e.message}`), text, null];
    }
  }
  const segments = rest.split('/').filter(Boolean);
  let query = search || '';
  try {
    query = decodeURIComponent(query);
  } catch {
    // a malformed escape: the router answers it
  }
  ensureTypesOf(segments, body, query);
  if (method === 'POST' && segments.length === 1 && segments[0] === '$graphql' && graphqlMutation(body)) {
    // Medplum's router runs GraphQL mutations: writes past the write cap, the binding checks and
    // the request log's account of what was written. The REST interactions do every write.
    const why = 'graphql mutation: writes go through the REST interactions (create, update, patch, delete, '
      + 'transaction), not GraphQL';
    return [405, outcome('not-supported', why), body, why];
  }
  const writes = writesOf(method, segments, body);
  if (writes.length) {
    if (c.writes + writes.length > c.cap) {
      const why = `write cap: ${c.cap} writes allowed per case, ${c.writes} made, this request makes ${writes.length}`;
      return [429, outcome('throttled', why), body, why];
    }
    for (const w of writes) {
      const problem = w.method === 'PATCH'
        ? await patchedProblem(c.repo, w.type, w.id, w.resource === undefined ? body : w.resource)
        : (w.method === 'DELETE' ? null : bindingProblem(w.resource));
      if (problem) {
        const why = `binding: ${problem[1]}`;
        return [422, outcome('code-invalid', problem[1], problem[0]), body, why];
      }
    }
  }
  if (method === 'GET' && rest === 'metadata') {
    return [200, capability(), body, null];
  }
  const req = { method, url: fhirUrl(rest, search), pathname: '', query: {}, params: {}, body, headers };
  const result = await router.handleRequest(req, c.repo);
  const status = core.getStatus(result[0]);
  if (core.isOk(result[0]) && writes.length) c.writes += writes.length;
  const out = result.length > 1 ? result[1] : result[0];
  if (method === 'GET' && out && out.resourceType === 'Bundle' && out.type === 'searchset') pageLinks(out, rest, search);
  return [status, out, body, null];
}

// Medplum's in-memory search pages (_count, _offset) but links no next page: a client would
// not know more matched. The wrapper adds the self and next links (relative to the case's base).
function pageLinks(bundle, rest, search) {
  const params = new URLSearchParams(search);
  const offset = Number.parseInt(params.get('_offset') || '0', 10) || 0;
  const shown = (bundle.entry || []).length;
  const link = [{ relation: 'self', url: `${rest}${search || ''}` }];
  if (typeof bundle.total === 'number' && offset + shown < bundle.total && shown > 0) {
    params.set('_offset', String(offset + shown));
    link.push({ relation: 'next', url: `${rest}?${params.toString()}` });
  }
  bundle.link = link;
}

function capability() {
  return {
    resourceType: 'CapabilityStatement', status: 'active', kind: 'instance', fhirVersion: '4.0.1',
    format: ['json'], date: '2026-01-01',
    software: { name: 'groundeval fhir server (Medplum fhir-router, in-memory)' },
    rest: [{ mode: 'server' }],
  };
}

function note(c, method, path, status, request, response, refused, size) {
  c.logBytes += size; // counted for dropped requests too: once over, every later one is dropped
  if (c.logBytes > MAX_LOG_BYTES) { // (the log is a prefix, with no hole a later small write could hide in)
    c.cut += 1;
    return;
  }
  c.log.push({ seq: c.log.length + c.cut + 1, method, path, status, request: request ?? null,
    response: response ?? null, refused: refused ?? null });
}

// -- control ------------------------------------------------------------------------------
// A case's bundle as one transaction. Resources keep their ids (PUT Type/id: the task names
// its patient by the bundle's id), and references to an entry's fullUrl (Synthea's
// urn:uuid:...) become Type/id; a resource without an id is POSTed (the server assigns one).
function seedBundle(bundle) {
  const entries = (bundle && Array.isArray(bundle.entry)) ? bundle.entry : [];
  const resources = entries.map((e) => (e && e.resource) || e);
  const local = new Map();
  entries.forEach((e, i) => {
    const r = resources[i];
    if (e && e.fullUrl && r && r.id) local.set(e.fullUrl, `${r.resourceType}/${r.id}`);
  });
  const relink = (value) => {
    if (Array.isArray(value)) return value.map(relink);
    if (value && typeof value === 'object') {
      const out = {};
      for (const [k, v] of Object.entries(value)) {
        out[k] = (k === 'reference' && typeof v === 'string' && local.has(v)) ? local.get(v) : relink(v);
      }
      return out;
    }
    return value;
  };
  return {
    resourceType: 'Bundle', type: 'transaction',
    entry: entries.map((e, i) => {
      const resource = relink(resources[i]);
      if (resource.id) return { resource, request: { method: 'PUT', url: `${resource.resourceType}/${resource.id}` } };
      return { ...(e.fullUrl ? { fullUrl: e.fullUrl } : {}), resource, request: { method: 'POST', url: resource.resourceType } };
    }),
  };
}

// -- refusals: requests for no open case, control calls without the harness's token -------
const refusals = []; // the last MAX_REFUSALS, oldest first
const MAX_REFUSALS = 1000;
let refusedCount = 0;

// a path as logged: a long hex run (a token, right or guessed) cut to its first 6 characters
function shown(pathname) {
  return pathname.replace(/[0-9a-fA-F]{16,}/g, (m) => `${m.slice(0, 6)}…(${m.length})`);
}

function refuse(req, res, status, why, body) {
  refusedCount += 1;
  refusals.push({ seq: refusedCount, at: new Date().toISOString(), method: req.method,
    path: shown(new URL(req.url, 'http://127.0.0.1').pathname), status, reason: why,
    from_port: req.socket.remotePort ?? null });
  if (refusals.length > MAX_REFUSALS) refusals.shift();
  req.resume(); // its body, unread, is drained
  return send(res, status, body, status === 403 ? 'application/json' : FHIR_JSON);
}

function sameSecret(given, secret) {
  const a = Buffer.from(String(given || ''));
  const b = Buffer.from(secret);
  return a.length === b.length && crypto.timingSafeEqual(a, b);
}

const byToken = new Map(); // a case's token -> its id (the id names it in control calls only)
let caseSeq = 0;

async function openCase(res, text) {
  let spec;
  try {
    spec = JSON.parse(text || '{}');
  } catch (e) {
    return send(res, 400, { error: `not JSON: ${e.message}` }, 'application/json');
  }
  // the case's token: made by the harness for this opening of the case (never derived from
  // anything another process can read), and the case's only way in. The ids the repository
  // assigns are a plain digest of the harness's key: the same run after run (a model-call
  // cache replays them), and no way in.
  if (typeof spec.token !== 'string' || !CASE_TOKEN.test(spec.token) || byToken.has(spec.token)) {
    return send(res, 400, { error: 'a case needs a fresh token of its own (64 hex characters)' }, 'application/json');
  }
  const keyed = typeof spec.key === 'string' && spec.key;
  const repoKey = keyed ? crypto.createHash('sha256').update(spec.key).digest('hex').slice(0, 24)
    : crypto.randomBytes(12).toString('hex');
  const c = { repo: new CaseRepository(repoKey, spec.clock), log: [], logBytes: 0, cut: 0, writes: 0,
    cap: Number.isInteger(spec.write_cap) ? spec.write_cap : DEFAULT_CAP, token: spec.token };
  if (spec.bundle) {
    ensureTypesOf([], spec.bundle, '');
    const [result, outcomeOrBundle] = await router.handleRequest(
      { method: 'POST', url: '/', pathname: '', query: {}, params: {}, body: seedBundle(spec.bundle) }, c.repo)
      .then((r) => [r[0], r[1]]);
    if (!core.isOk(result)) {
      return send(res, 400, { error: `the bundle could not be seeded: ${core.normalizeErrorString(result)}`,
        outcome: result }, 'application/json');
    }
    const failed = (outcomeOrBundle?.entry || []).filter((e) => !String(e.response?.status || '').startsWith('2'));
    if (failed.length) {
      return send(res, 400, { error: `the bundle could not be seeded: ${failed.length} entries failed`,
        outcome: failed[0].response?.outcome }, 'application/json');
    }
  }
  caseSeq += 1;
  const id = String(caseSeq);
  cases.set(id, c);
  byToken.set(c.token, id);
  const state = dump(c.repo);
  return send(res, 201, { id, base_path: `/case/${c.token}/fhir/R4`, seeded: Object.keys(state).length,
    state }, 'application/json');
}

function dropCase(id) {
  const c = cases.get(id);
  if (c) byToken.delete(c.token);
  cases.delete(id);
}

async function control(req, res, segments, text) {
  const [what, id, sub] = segments;
  if (what === 'health' && req.method === 'GET') {
    return send(res, 200, { ok: true, cases: cases.size }, 'application/json');
  }
  if (what === 'shutdown' && req.method === 'POST') {
    send(res, 200, { stopping: true }, 'application/json');
    return stop();
  }
  if (what === 'refused' && req.method === 'GET') {
    return send(res, 200, { refused: refusals, count: refusedCount }, 'application/json');
  }
  if (what !== 'cases') return send(res, 404, { error: `no control call ${segments.join('/')}` }, 'application/json');
  if (req.method === 'POST' && !id) return openCase(res, text);
  const c = cases.get(id);
  if (!c) return send(res, 404, { error: `no case ${id}` }, 'application/json');
  if ((req.method === 'GET' && sub === 'activity') || (req.method === 'POST' && sub === 'close')) {
    if (sub === 'close') dropCase(id); // the activity, and the repository dropped
    return send(res, 200, { requests: c.log, requests_cut: c.cut, writes: c.writes, state: dump(c.repo) },
      'application/json');
  }
  if (req.method === 'DELETE' && !sub) {
    dropCase(id);
    return send(res, 200, { dropped: true }, 'application/json');
  }
  return send(res, 404, { error: `no control call ${req.method} ${segments.join('/')}` }, 'application/json');
}

// -- the HTTP server --------------------------------------------------------------------------
const FHIR_PATH = /^\/case\/([^/]*)\/fhir\/R4(?:\/(.*))?$/;
const GONE = 'no such case on this server (it ended, or never was)';

async function handle(req, res) {
  const url = new URL(req.url, 'http://127.0.0.1');
  const segments = url.pathname.split('/').filter(Boolean);
  if (segments[0] === '_control') {
    if (!sameSecret(req.headers['x-groundeval-control'], TOKEN)) {
      return refuse(req, res, 403, 'a control call without the harness token',
        { error: 'control calls need the harness token' });
    }
    let text;
    try {
      text = await readBody(req);
    } catch (e) {
      return send(res, 413, { error: e.message }, 'application/json');
    }
    return control(req, res, segments.slice(1), text);
  }
  // the path's token names the case: an open case's, or nothing (never a case from a guess)
  const m = FHIR_PATH.exec(url.pathname);
  if (!m) return refuse(req, res, 404, 'not a case\'s FHIR path', outcome('not-found', `not a case's FHIR path`));
  const id = CASE_TOKEN.test(m[1]) ? byToken.get(m[1]) : undefined;
  const c = id === undefined ? undefined : cases.get(id);
  if (!c) return refuse(req, res, 404, 'no open case has this token', outcome('not-found', GONE));
  let text;
  try {
    text = await readBody(req);
  } catch (e) {
    const why = e.message;
    note(c, req.method.toUpperCase(), (m[2] || '') + url.search, 413, null, null, why, Buffer.byteLength(why));
    return send(res, 413, outcome('too-costly', why));
  }
  const rest = (m[2] || '').replace(/\/+$/, '');
  const method = req.method.toUpperCase();
  const headers = {};
  for (const h of ['if-none-exist', 'if-match']) if (req.headers[h]) headers[h] = req.headers[h];
  let status;
  let response;
  let request;
  let refused;
  try {
    [status, response, request, refused] = await fhir(c, method, rest, url.search, text, headers);
  } catch (e) {
    status = 500;
    response = outcome('exception', `server error: ${e && e.message}`);
    request = text || null;
  }
  const out = JSON.stringify(response);
  note(c, method, rest + url.search, status, request, response, refused,
    Buffer.byteLength(out) + Buffer.byteLength(text || '') + Buffer.byteLength(rest + url.search));
  const headersOut = {};
  if (status === 201 && response && response.id) headersOut.location = `${response.resourceType}/${response.id}`;
  res.writeHead(status, { 'content-type': FHIR_JSON, 'content-length': Buffer.byteLength(out), ...headersOut });
  res.end(out);
}

const server = http.createServer((req, res) => {
  handle(req, res).catch((e) => {
    try {
      send(res, 500, outcome('exception', `server error: ${e && e.message}`));
    } catch {
      res.destroy();
    }
  });
});
server.keepAliveTimeout = 30000;

let stopping = false;
function stop() {
  if (stopping) return;
  stopping = true;
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 2000).unref();
}

process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop); // the harness that started this process is gone
process.stdin.on('error', stop);
process.stdin.resume();

server.listen(Number.isInteger(config.port) ? config.port : 0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`);
});
