// A bounded loopback load test of `qkv serve`: N clients (default 8) for D seconds (default 10), each
// sending a mix of requests back to back. Every response is checked (status, JSON, the numbers):
// fixed texts must return exactly the pattern they returned alone before the load (no request sees
// another's activations), fresh random texts must return patterns whose rows sum to 1 with the mask
// respected, and deliberate mistakes must get their 4xx JSON error. Zero errors to pass.
// Usage: node load_test.js URL [CLIENTS] [SECONDS]
'use strict';
const http = require('http');

const [url, clientsArg, secondsArg] = process.argv.slice(2);
const CLIENTS = Math.min(64, Number(clientsArg || 8)), SECONDS = Math.min(60, Number(secondsArg || 10));
const base = new URL(url);
if (!['127.0.0.1', 'localhost', '[::1]'].includes(base.hostname)) {
  console.error(`load test: refusing ${base.hostname}: loopback only`);
  process.exit(2);
}
const agent = new http.Agent({ keepAlive: true, maxSockets: CLIENTS });

function request(method, path, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const req = http.request({ host: base.hostname.replace(/^\[|\]$/g, ''), port: base.port, path, method, agent, timeout: 30000,
      headers: data ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } : {} }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, type: res.headers['content-type'] || '', body: Buffer.concat(chunks).toString() }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

const FIXED = ['the cat sat on the mat', 'When Mary and John went to the store, John gave a drink to Mary', 'abcabcabcabc'];
const refs = {};
const letters = 'abcdefghijklmnopqrstuvwxyz     .,';
function randomText(rng) {
  const n = 1 + Math.floor(rng() * 100);
  let s = '';
  for (let i = 0; i < n; i++) s += letters[Math.floor(rng() * letters.length)];
  return s;
}
function rngFor(seed) { let s = seed >>> 0; return () => ((s = (s * 1664525 + 1013904223) >>> 0) + 0.5) / 4294967296; }

function checkPattern(p, T) {
  if (p.length !== T) return `pattern has ${p.length} rows, expected ${T}`;
  for (let i = 0; i < T; i++) {
    let sum = 0;
    for (let j = 0; j < T; j++) {
      if (j > i && p[i][j] !== 0) return `masked cell [${i},${j}] is ${p[i][j]}`;
      sum += p[i][j];
    }
    if (Math.abs(sum - 1) > 1e-5) return `row ${i} sums to ${sum}`;
  }
  return '';
}

// One request of the mix; returns '' or what went wrong.
async function one(rng, client) {
  const k = Math.floor(rng() * 10);
  if (k <= 2) {  // a fixed text: exactly the reference
    const t = FIXED[Math.floor(rng() * FIXED.length)], layer = Math.floor(rng() * 2), head = Math.floor(rng() * 4);
    const r = await request('POST', '/api/attention', { text: t, layer, head, grid: false });
    if (r.status !== 200) return `attention ${r.status}: ${r.body.slice(0, 200)}`;
    const j = JSON.parse(r.body);
    return JSON.stringify(j.focus.pattern) === refs[`${t}|${layer}|${head}`] ? '' : `pattern of "${t}" L${layer}H${head} differs from the one computed alone`;
  }
  if (k <= 5) {  // a fresh random text: computed now, checked for shape, mask and row sums
    const t = randomText(rng);
    const r = await request('POST', '/api/attention', { text: t, layer: Math.floor(rng() * 2), head: Math.floor(rng() * 4), scale: rng() < 0.5 });
    if (r.status !== 200) return `attention ${r.status}: ${r.body.slice(0, 200)}`;
    const j = JSON.parse(r.body);
    if (j.T !== Buffer.byteLength(t)) return `T ${j.T} for ${Buffer.byteLength(t)} bytes`;
    return checkPattern(j.focus.pattern, j.T);
  }
  if (k === 6) {
    const r = await request('POST', '/api/soft-dictionary', { Q: [[1, 2]], K: [[1, 0], [1, 1], [0, 2]], V: [[1, 0], [0.5, 0.5], [1, 0]] });
    const j = r.status === 200 && JSON.parse(r.body);
    return j && Math.abs(j.output[0][0] - 0.8471523745805126) < 1e-12 ? '' : `soft dictionary ${r.status}: ${r.body.slice(0, 200)}`;
  }
  if (k === 7) {
    const r = await request('GET', rng() < 0.5 ? '/' : '/app.js');
    return r.status === 200 && r.body.length > 1000 ? '' : `asset ${r.status}`;
  }
  if (k === 8) {  // mistakes get their JSON error
    const cases = [
      ['POST', '/api/attention', { text: 'x'.repeat(300) }, 400],
      ['POST', '/api/attention', '{not json', 400],
      ['GET', '/../etc/passwd', undefined, 404],
      ['POST', '/api/attention', { text: 'y'.repeat(70000) }, 413],
    ];
    const [m, p, b, want] = cases[Math.floor(rng() * cases.length)];
    const r = await request(m, p, b);
    let ok = r.status === want && r.type.startsWith('application/json');
    try { ok = ok && typeof JSON.parse(r.body).error === 'string'; } catch (e) { ok = false; }
    return ok ? '' : `${m} ${p}: ${r.status} (${r.type}), expected ${want} JSON error`;
  }
  const r = await request('GET', '/api/info');
  return r.status === 200 && JSON.parse(r.body).config ? '' : `info ${r.status}`;
}

(async () => {
  for (const t of FIXED)
    for (let layer = 0; layer < 2; layer++)
      for (let head = 0; head < 4; head++) {
        const r = await request('POST', '/api/attention', { text: t, layer, head, grid: false });
        if (r.status !== 200) { console.log(`FAIL load: reference request ${r.status} ${r.body}`); process.exit(1); }
        refs[`${t}|${layer}|${head}`] = JSON.stringify(JSON.parse(r.body).focus.pattern);
      }
  const end = Date.now() + SECONDS * 1000;
  let count = 0;
  const errors = [], lat = [];
  await Promise.all([...Array(CLIENTS).keys()].map(async (c) => {
    const rng = rngFor(1000 + c);
    while (Date.now() < end) {
      const t0 = process.hrtime.bigint();
      let e;
      try { e = await one(rng, c); } catch (x) { e = String(x); }
      lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
      count++;
      if (e) errors.push(`client ${c}: ${e}`);
    }
  }));
  agent.destroy();
  lat.sort((a, b) => a - b);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(1);
  const summary = `${CLIENTS} clients × ${SECONDS} s: ${count} requests (${(count / SECONDS).toFixed(0)}/s), ${errors.length} errors; latency ms p50 ${q(0.5)}, p95 ${q(0.95)}, max ${q(1)}`;
  for (const e of errors.slice(0, 10)) console.log('  ' + e);
  const ok = errors.length === 0 && count >= CLIENTS;
  console.log(`${ok ? 'ok  ' : 'FAIL'} load: ${summary}`);
  process.exit(ok ? 0 : 1);
})();
