// qkv serve's patching view and rotary panels in a real browser (Debian's chromium, playwright-core).
// Patching, on the bundled GPT-2 model: the heatmap the page draws equals `qkv patch --json` and the API
// for the same inputs (repeated task, texts with a logit difference, per-position denoising), the seeds'
// picture (value patching of the previous-token head 0.1 → 0.150); clicking a cell shows that head's
// pattern before and after (values patched: bit-identical; keys patched: it moves); a running sweep reports
// its progress; the direct logit attribution equals `qkv attribute --json`; bad input (unknown hook,
// empty text, too long, unequal lengths) answered with a clear message and the server still up.
// Rotary, on a Llama-shaped checkpoint: the pattern equals `qkv dump`; S is the ROTATED score (checked
// against rotate_half written here in JS on the dump's unrotated q and k); Sᵀ is S's transpose cell by cell
// and S is not symmetric; the W_Q ↔ W_K swap gives Sᵀ; the offset chart equals the JS rotation and depends
// on i − j only; heads and circuits equal the CLI's. Screenshots in ARTIFACTS_DIR.
// Optionally a family checkpoint without a tokenizer: ids typed as "ids: 1, 2, 3", patching equal to the CLI.
// Usage: node patch_test.js QKV_BINARY ARTIFACTS_DIR GPT2_URL GPT2_MODEL LLAMA_URL LLAMA_MODEL [NOTOK_URL NOTOK_MODEL]
'use strict';
const { launchChromium, waitFor } = require('./page_util');
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { readNpy } = require('./npy');

const [qkv, artifacts, gptUrl, gptModel, llUrl, llModel, ntUrl, ntModel] = process.argv.slice(2);
if (!llModel) { console.error('usage: node patch_test.js QKV_BINARY ARTIFACTS_DIR GPT2_URL GPT2_MODEL LLAMA_URL LLAMA_MODEL [NOTOK_URL NOTOK_MODEL]'); process.exit(2); }
fs.mkdirSync(artifacts, { recursive: true });

let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} browser: ${name}${detail ? ' — ' + detail : ''}`);
  if (!ok) failures++;
}
const cliJson = (...args) => JSON.parse(execFileSync(qkv, args, { maxBuffer: 64 << 20 }).toString());
const maxAbs = (a, b) => a.reduce((m, v, k) => Math.max(m, Math.abs(v - b[k])), a.length === b.length ? 0 : Infinity);

async function canvasGeom(page, id) {
  await page.locator('#' + id).scrollIntoViewIfNeeded();
  const box = await page.locator('#' + id).boundingBox();
  const d = await page.$eval('#' + id, (c) => ({ x0: +c.dataset.x0, y0: +c.dataset.y0, cell: +c.dataset.cell }));
  return { at: (i, j) => [box.x + d.x0 + (j + 0.5) * d.cell, box.y + d.y0 + (i + 0.5) * d.cell] };
}

// ---- patching (bundled GPT-2) ------------------------------------------------------------------------
async function patching(page) {
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  // the refusals below are 400 answers, which the browser logs as failed loads: those are expected
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 400/.test(m.text())) problems.push('console: ' + m.text()); });
  await page.goto(gptUrl);
  await waitFor(page, () => document.body.dataset.ready !== undefined);
  const rope = await page.textContent('#rope-off');
  check('GPT-2: the rotary chart says positions are learned', !(await page.$eval('#rope-off', (e) => e.hidden)) && /learned positions/.test(rope), rope.slice(0, 70));
  await page.locator('#patch').scrollIntoViewIfNeeded();

  let done = 0;
  const run = async () => {
    await page.click('#patch-run');
    done++;
    await waitFor(page, (n) => document.body.dataset.patchDone === String(n), done, { timeout: 120000 });
  };
  const grid = () => page.$eval('#patch-canvas', (c) => JSON.parse(c.dataset.values || '[]'));
  const compare = async (name, cliArgs) => {
    const cli = cliJson(...cliArgs, '--json');
    const g = (await grid()).flat();
    const want = cli.sites.map((s) => s.normalised);
    const d = maxAbs(g, want);
    check(`${name}: the heatmap's ${g.length} cells equal qkv patch --json`, g.length === want.length && d <= 1e-12,
      `${g.length} cells, max |page − CLI| ${d}${d === 0 ? ' (exact)' : ''}`);
    return cli;
  };

  // 1. the repeated-sequence task, values patched, noising (docs/patching.md's table)
  await page.check('#patch-src-rep');
  await page.fill('#patch-n', '25');
  await page.fill('#patch-hook', 'attn.hook_v');
  // Watch for the busy state from inside the page (a fast sweep can finish before a round trip from
  // here could look): set when data-patch-busy appears while the button is disabled.
  await page.evaluate(() => {
    window.__sawBusy = false;
    new MutationObserver(() => {
      if (document.body.dataset.patchBusy === '1' && document.getElementById('patch-run').disabled) window.__sawBusy = true;
    }).observe(document.body, { attributes: true, attributeFilter: ['data-patch-busy'] });
  });
  const t0 = Date.now();
  await page.click('#patch-run');
  done++;
  await waitFor(page, (n) => document.body.dataset.patchDone === String(n), done, { timeout: 120000 });
  const busy = await page.evaluate(() => window.__sawBusy);
  check('busy state while the sweep runs (button disabled, status shown)', busy, `${Date.now() - t0} ms`);
  const cliV = await compare('repeated 25, attn.hook_v', ['patch', '--model', gptModel, '--repeated', '25', '--hook', 'attn.hook_v']);
  const api = await page.evaluate(async () => (await fetch('/api/patch', { method: 'POST', body: JSON.stringify({ repeated: 25, hook: 'attn.hook_v' }) })).json());
  const g = (await grid()).flat();
  check('… and equal the JSON API', maxAbs(g, api.sites.map((s) => s.normalised)) === 0 && api.forwards === cliV.forwards, `forwards ${api.forwards}`);
  check('the seeds\' picture: the previous-token head 0.1\'s values matter (0.150)', g[1].toFixed(3) === '0.150' && g[4].toFixed(3) === '0.779', `0.1 ${g[1].toFixed(3)}, 1.0 ${g[4].toFixed(3)}`);
  const summary = await page.textContent('#patch-summary');
  check('clean and corrupt metrics shown', summary.includes(String(Number(cliV.clean.toPrecision(6)))), summary.slice(0, 110));
  // hover a cell: its number
  let pg = await canvasGeom(page, 'patch-canvas');
  await page.mouse.move(...pg.at(1, 0));
  await waitFor(page, () => document.getElementById('patch-readout').dataset.layer === '1');
  const ro = await page.$eval('#patch-readout', (r) => ({ ...r.dataset }));
  check('hover a cell: layer 1 head 0, the CLI\'s value', ro.head === '0' && Number(ro.value) === cliV.sites[4].normalised, `${ro.value}`);
  // click head 0.1: its pattern before and after the value patch — bit-identical
  await page.mouse.click(...pg.at(0, 1));
  await waitFor(page, () => document.body.dataset.siteReady === '0,1,null', null, { timeout: 60000 });
  let note = await page.$eval('#site-note', (n) => ({ ...n.dataset, text: n.textContent }));
  check('click 0.1 (values patched): its pattern before and after, bit-identical', note.maxAbsChange === '0' && /bit-identical/.test(note.text), note.text.slice(0, 90));
  const before = await page.evaluate(async (ids) => {
    const site = await (await fetch('/api/patch-site', { method: 'POST', body: JSON.stringify({ repeated: 25, hook: 'attn.hook_v', layer: 0, head: 1 }) })).json();
    const att = await (await fetch('/api/attention', { method: 'POST', body: JSON.stringify({ ids, layer: 0, head: 1, grid: false }) })).json();
    return { site, att: att.focus.pattern };
  }, cliV.inputs.clean);
  const flat = (m) => m.flat();
  check('"before" is the clean run\'s pattern of head 0.1 (= /api/attention, exact)', maxAbs(flat(before.site.before), flat(before.att)) === 0, `max |Δ| ${maxAbs(flat(before.site.before), flat(before.att))}`);
  check('… and later heads moved (layer 1 sees the patched values)', Math.max(...before.site.pattern_change[1]) > 0.01, before.site.pattern_change[1].map((v) => v.toFixed(3)).join(' '));
  const drawn = await page.$eval('#site-before', (c) => c.width > 100) && await page.$eval('#site-after', (c) => c.width > 100);
  check('before and after heatmaps drawn', drawn);
  await page.locator('#patch').screenshot({ path: path.join(artifacts, 'qkv-patch-values.png') });

  // path patching 0.1 → 1.0's key: docs/patching.md's 80.5%, = qkv patch --path --json
  await page.click('#path-run');
  await waitFor(page, () => /^0\.1:1\.0:k\//.test(document.body.dataset.pathReady || ''), null, { timeout: 60000 });
  const pr = await page.$eval('#path-result', (e) => ({ ...e.dataset, text: e.textContent }));
  const pcli = cliJson('patch', '--model', gptModel, '--repeated', '25', '--path', '0.1:1.0:k', '--json');
  check('path patching 0.1 → 1.0 k: = qkv patch --path --json, the path carries 80.5%', Number(pr.normalised) === pcli.normalised &&
    Number(pr.fraction) === pcli.fraction_of_receiver_effect && (100 * pcli.fraction_of_receiver_effect).toFixed(1) === '80.5', pr.text.slice(0, 150));
  await page.fill('#path-sender', '1.0');
  await page.click('#path-run');
  await waitFor(page, () => /^error\//.test(document.body.dataset.pathReady || ''), null, { timeout: 30000 });
  const perr = await page.textContent('#patch-error');
  check('path patching: a sender after the receiver is refused, saying why', /must come before the receiver/.test(perr), perr);
  await page.fill('#path-sender', '0.1');

  // 2. keys patched: the induction head's pattern moves
  await page.fill('#patch-hook', 'attn.hook_k');
  await run();
  await compare('repeated 25, attn.hook_k', ['patch', '--model', gptModel, '--repeated', '25', '--hook', 'attn.hook_k']);
  pg = await canvasGeom(page, 'patch-canvas');
  await page.mouse.click(...pg.at(1, 0));
  await waitFor(page, () => document.body.dataset.siteReady === '1,0,null', null, { timeout: 60000 });
  note = await page.$eval('#site-note', (n) => ({ ...n.dataset, text: n.textContent }));
  check('click 1.0 (keys patched): the induction head\'s pattern moves', Number(note.maxAbsChange) > 0.3, `max |Δ pattern| ${note.maxAbsChange}`);
  await page.locator('#patch').screenshot({ path: path.join(artifacts, 'qkv-patch-keys.png') });

  // 3. texts and a logit difference, hook_result
  const clean = 'the quick brown fox. the quick brown f', corrupt = 'the quick brown cat. the quick brown f';
  await page.check('#patch-src-text');
  await page.fill('#patch-clean', clean);
  await page.fill('#patch-corrupt', corrupt);
  await page.selectOption('#patch-metric', 'logit_diff');
  await page.fill('#patch-answer', 'o');
  await page.fill('#patch-wrong', 'a');
  await page.fill('#patch-hook', 'attn.hook_result');
  await run();
  await compare('texts, logit difference o − a, attn.hook_result', ['patch', '--model', gptModel, '--clean', clean, '--corrupt', corrupt, '--answer', 'o', '--wrong', 'a', '--hook', 'attn.hook_result']);

  // 4. per position, denoising, one layer
  await page.check('#patch-src-rep');
  await page.fill('#patch-n', '10');
  await page.selectOption('#patch-metric', 'loss');
  await page.fill('#patch-hook', 'blocks.1.attn.hook_k');
  await page.check('#patch-perpos');
  await page.selectOption('#patch-dir', 'denoising');
  await run();
  await compare('per position, denoising, blocks.1.attn.hook_k', ['patch', '--model', gptModel, '--repeated', '10', '--hook', 'blocks.1.attn.hook_k', '--per-position', '--direction', 'denoising']);
  const rows = await page.$eval('#patch-canvas', (c) => `${c.dataset.rows}×${c.dataset.cols}`);
  check('per position: a row per layer.head, a column per position', rows === '4×20', rows);
  await page.uncheck('#patch-perpos');
  await page.selectOption('#patch-dir', 'noising');

  // progress: a 128-site sweep reports its sites while it runs (/api/patch-progress, what the page polls)
  const prog = await page.evaluate(async () => {
    const post = (p, b) => fetch(p, { method: 'POST', body: JSON.stringify(b) }).then((r) => r.json());
    const sweep = post('/api/patch', { repeated: 16, hook: 'blocks.1.attn.hook_q', per_position: true, job: 'test-progress' });
    let seen = null, finished = false;
    sweep.then(() => { finished = true; });
    while (!finished) {
      const p = await post('/api/patch-progress', { job: 'test-progress' });
      if (p.running && p.done > 0 && p.done < p.total) { seen = p; break; }
      await new Promise((r) => setTimeout(r, 20));
    }
    const r = await sweep;
    const after = await post('/api/patch-progress', { job: 'test-progress' });
    return { seen, sites: r.sites.length, after };
  });
  check('progress: a running sweep reports "site k of n" and forgets the job when done', prog.seen !== null && prog.seen.total === 128 && prog.sites === 128 && prog.after.running === false,
    JSON.stringify(prog.seen) + ` then running=${prog.after.running}`);

  // direct logit attribution of the clean text = qkv attribute --json
  await page.check('#patch-src-text');
  await page.fill('#patch-clean', clean);
  await page.selectOption('#patch-metric', 'logit_diff');
  await page.fill('#patch-answer', 'o');
  await page.fill('#patch-wrong', 'a');
  await page.fill('#patch-pos', '-1');
  await page.click('#dla-run');
  await waitFor(page, () => document.body.dataset.dlaReady !== undefined, null, { timeout: 60000 });
  const dla = cliJson('attribute', '--model', gptModel, '--text', clean, '--answer', 'o', '--wrong', 'a', '--json');
  const dg = await page.$eval('#dla-canvas', (c) => JSON.parse(c.dataset.values));
  let dd = 0;
  for (const t of dla.terms) if (t.kind === 'head') dd = Math.max(dd, Math.abs(dg[t.layer][t.head] - t.value));
  check('DLA: every head\'s term on the page = qkv attribute --json', dd === 0, `max |Δ| ${dd}`);
  const dn = await page.$eval('#dla-note', (n) => ({ ...n.dataset, text: n.textContent }));
  check('DLA: the logit difference and the terms\' sum shown (docs: 15.69)', Number(dn.logitDiff) === dla.logit_diff && dla.logit_diff.toFixed(2) === '15.69' && Math.abs(Number(dn.sumTerms) - dla.logit_diff) < 1e-5, dn.text.slice(0, 120));
  check('DLA: the induction head 1.0 carries the most (+7.70)', dg[1][0].toFixed(2) === '7.70', dg.map((r) => r.map((v) => v.toFixed(2)).join(' ')).join(' | '));
  await page.locator('#patch').screenshot({ path: path.join(artifacts, 'qkv-patch-dla.png') });

  // 5. bad input: a clear message, no crash
  const errorOf = async () => {
    await page.click('#patch-run');
    done++;
    await waitFor(page, (n) => document.body.dataset.patchDone === String(n), done, { timeout: 30000 });
    return page.textContent('#patch-error');
  };
  await page.check('#patch-src-rep');
  await page.selectOption('#patch-metric', 'loss');
  await page.fill('#patch-n', '10');
  await page.fill('#patch-hook', 'attn.hook_nope');
  let err = await errorOf();
  check('bad hook: refused, naming the hook points', /no hook point 'blocks\.0\.attn\.hook_nope'/.test(err) && /hook_v/.test(err), err.slice(0, 100));
  await page.fill('#patch-hook', 'attn.hook_v');
  await page.fill('#patch-n', '100');
  err = await errorOf();
  check('too long (200 tokens): refused, saying the limit', /200 tokens; at most 128/.test(err), err);
  await page.check('#patch-src-text');
  await page.selectOption('#patch-metric', 'loss');
  await page.fill('#patch-lp', '1');
  await page.fill('#patch-clean', '');
  err = await errorOf();
  check('empty clean text: refused', /"clean" is empty/.test(err), err);
  await page.fill('#patch-clean', 'abc');
  await page.fill('#patch-corrupt', 'abcd');
  err = await errorOf();
  check('unequal lengths: refused, saying why', /equal length in tokens.*clean has 3, corrupt 4/.test(err), err);
  await page.fill('#patch-clean', 'x'.repeat(300));
  err = await errorOf();
  check('a text beyond the limit: refused, nothing truncated', /300 tokens; patching takes at most 128/.test(err), err);
  const apiErrs = await page.evaluate(async () => {
    const post = async (b) => { const r = await fetch('/api/patch', { method: 'POST', body: JSON.stringify(b) }); return [r.status, (await r.json()).error]; };
    return [await post({ repeated: 5, hook: 'attn.hook_v', direction: 'sideways' }), await post({ repeated: 5, hook: 'attn.hook_v', metric: 'logit_diff', answer: 'o' }),
      await post({ repeated: 5, hook: 'attn.hook_v', bogus: 1 }), await post({ repeated: 5, hook: 'attn.hook_v', answer: 'oo', wrong: 'a' }),
      await post({ repeated: 5, hook: 'attn.hook_v', layer: 0 }), (await fetch('/api/info')).status];
  });
  check('API: bad direction / half a metric / unknown key / two-token answer → 400 with a message',
    apiErrs.slice(0, 5).every(([s]) => s === 400) && /noising or denoising/.test(apiErrs[0][1]) && /needs "answer" and "wrong"/.test(apiErrs[1][1]) &&
    /unknown key "bogus"/.test(apiErrs[2][1]) && /is 2 tokens, not one/.test(apiErrs[3][1]) && /unknown key "layer"/.test(apiErrs[4][1]), JSON.stringify(apiErrs.slice(0, 5)));
  check('the server still answers after the refusals', apiErrs[5] === 200);
  check('patching: no console errors or page errors', problems.length === 0, problems.join(' | '));
}

// ---- rotary (Llama-shaped) ---------------------------------------------------------------------------
// rotate_half (Hugging Face): pairs (e, e + r/2) for e < r/2, angle = pos · θ^(−2e/r); dims ≥ r unrotated.
function rotate(x, pos, r, theta) {
  const y = Float64Array.from(x), h = r / 2;
  for (let e = 0; e < h; e++) {
    const a = pos * Math.pow(theta, (-2 * e) / r), c = Math.cos(a), s = Math.sin(a);
    y[e] = x[e] * c - x[e + h] * s;
    y[e + h] = x[e + h] * c + x[e] * s;
  }
  return y;
}
const dot = (a, b) => a.reduce((s, v, k) => s + v * b[k], 0);

async function rotary(page) {
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  await page.goto(llUrl);
  await waitFor(page, () => document.body.dataset.ready !== undefined && document.body.dataset.ropeReady !== undefined, null, { timeout: 60000 });
  const info = await page.textContent('#model-info');
  check('Llama checkpoint: model info names the family, GQA and rotary', /llama/.test(info) && /2 key\/value heads/.test(info) && /rotary positions/.test(info), info.slice(0, 120));
  const fam = await page.textContent('#model-family-note');
  check('the page says S is computed from the ROTATED q and k', /ROTATED q and k/.test(fam), fam.slice(0, 100));
  // heads and circuits on a llama as on GPT-2: the page's scores are the CLI's, and the GQA compositions drawn
  await waitFor(page, () => /head scores on/.test(document.getElementById('heads-status').textContent), null, { timeout: 60000 });
  const apiHeads = await page.evaluate(async () => (await fetch('/api/heads', { method: 'POST', body: '{}' })).json());
  const cliHeads = cliJson('heads', '--model', llModel, '--seq-len', String(apiHeads.seq_len), '--batch', '4', '--seed', '0', '--json');
  let hd = apiHeads.heads.length === cliHeads.heads.length ? 0 : Infinity;
  apiHeads.heads.forEach((h, i) => { for (const k of ['previous_token', 'duplicate_token', 'induction']) hd = Math.max(hd, Math.abs(h[k] - cliHeads.heads[i][k])); });
  const apiCirc = await page.evaluate(async () => (await fetch('/api/circuits')).json());
  check('Llama: heads & circuits drawn (no error), head scores = qkv heads --json (exact)', hd === 0 && apiCirc.n_kv_head === 2 &&
    apiCirc.compositions.length === 4 * 4 && (await page.$eval('#comp-canvas', (c) => c.width)) > 20 && (await page.$eval('#heads-error', (e) => e.hidden)),
    `${apiHeads.heads.length} heads, max |Δ| ${hd}, ${apiCirc.compositions.length} compositions`);
  check('pattern grid: 2 × 4 heads', (await page.$$('#grid canvas')).length === 8);
  await page.click('#grid canvas[data-layer="1"][data-head="2"]');
  await waitFor(page, () => { const c = document.getElementById('pattern'); return c.dataset.layer === '1' && c.dataset.head === '2'; });
  const text = await page.inputValue('#text');
  const api = await page.evaluate(async (t) => (await fetch('/api/attention', { method: 'POST', body: JSON.stringify({ text: t, layer: 1, head: 2, grid: false, swap_check: true }) })).json(), text);
  const T = api.T, f = api.focus;
  const dump = fs.mkdtempSync(path.join(os.tmpdir(), 'qkv-dump-'));
  execFileSync(qkv, ['dump', '--model', llModel, '--text', text, '--out', dump, '--layers', '1']);
  const pat = readNpy(path.join(dump, 'blocks.1.attn.hook_pattern.npy')), sc = readNpy(path.join(dump, 'blocks.1.attn.hook_attn_scores.npy'));
  const q = readNpy(path.join(dump, 'blocks.1.attn.hook_q.npy')), k = readNpy(path.join(dump, 'blocks.1.attn.hook_k.npy'));
  const cfg = JSON.parse(fs.readFileSync(path.join(llModel, 'config.json')));
  const H = cfg.num_attention_heads, nkv = cfg.num_key_value_heads, dh = cfg.hidden_size / H, theta = cfg.rope_theta || 10000;
  let dp = 0, ds = 0, dj = 0, asym = 0;
  const kh = Math.floor(2 / (H / nkv));
  for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
    dp = Math.max(dp, Math.abs(f.pattern[i][j] - pat.data[(2 * T + i) * T + j]));
    if (j <= i) ds = Math.max(ds, Math.abs(f.scores[i][j] - sc.data[(2 * T + i) * T + j]));
    const qi = rotate(q.data.subarray((i * H + 2) * dh, (i * H + 3) * dh), i, dh, theta);
    const kj = rotate(k.data.subarray((j * nkv + kh) * dh, (j * nkv + kh + 1) * dh), j, dh, theta);
    dj = Math.max(dj, Math.abs(f.scores[i][j] - dot(qi, kj) / Math.sqrt(dh)));
    asym = Math.max(asym, Math.abs(f.scores[i][j] - f.scores[j][i]));
  }
  check('Llama: the pattern equals qkv dump (exact)', dp === 0, `max |Δ| ${dp}`);
  check('S below the mask equals qkv dump\'s hook_attn_scores', ds <= 1e-6, `max |Δ| ${ds.toExponential(2)}`);
  check('every S cell (above the mask too) = (R_i q_i)·(R_j k_j)/√dh, rotate_half in JS on the dump\'s unrotated q, k', dj <= 1e-6, `max |Δ| ${dj.toExponential(2)}`);
  check('S is not symmetric (rotation or not, the query asks and the key answers)', asym > 1e-3, `max |S − Sᵀ| ${asym.toExponential(2)}`);
  // Sᵀ drawn: cell (i, j) of the right-hand panel is S[j][i]; and not S[i][j]
  const sg = await canvasGeom(page, 'scores'), tg = await canvasGeom(page, 'scores-t');
  const readS = async (g, i, j, which) => {
    await page.mouse.move(...g.at(i, j));
    await waitFor(page, ([a, b, w]) => { const d = document.getElementById('scores-readout').dataset; return d.i === String(a) && d.j === String(b) && d.which === w; }, [i, j, which], { timeout: 5000 });
    return Number(await page.$eval('#scores-readout', (r) => r.dataset.value));
  };
  const pairs = [[T - 1, 0], [5, 2], [2, 5], [7, 7]];
  let transposed = true, differs = 0;
  for (const [i, j] of pairs) {
    const s = await readS(sg, i, j, 'S'), st = await readS(tg, j, i, 'ST'), stSame = await readS(tg, i, j, 'ST');
    if (s !== f.scores[i][j] || st !== s) transposed = false;
    if (i !== j && stSame !== s) differs++;
    if (i === j && stSame !== s) transposed = false;  // the diagonal is its own transpose
  }
  check('Sᵀ panel at (j, i) shows S[i, j] (hovered, exact), the diagonal agrees', transposed);
  check('… and Sᵀ at (i, j) ≠ S at (i, j) off the diagonal', differs === 3, `${differs} of 3 off-diagonal cells differ`);
  const sw = await page.$eval('#swap', (p) => ({ ...p.dataset, text: p.textContent }));
  check('W_Q ↔ W_K swapped (with rotation): S\' equals Sᵀ', sw.transposes === 'true' && Number(sw.maxAbsDiff) <= 1e-6 && /equals Sᵀ/.test(sw.text), `max |S' − Sᵀ| ${sw.maxAbsDiff}`);
  await page.locator('#model').screenshot({ path: path.join(artifacts, 'qkv-rotary-model.png') });

  // the offset chart: layer 1, head 2, q of the last token, k of token 3
  await page.locator('#rope').scrollIntoViewIfNeeded();
  const rr = await page.evaluate(() => document.body.dataset.ropeReady);
  await page.selectOption('#rope-layer', '1');
  await page.selectOption('#rope-head', '2');
  await page.selectOption('#rope-j', '3');
  await waitFor(page, (r) => document.body.dataset.ropeReady !== r && document.getElementById('rope-canvas').dataset.head === '2' && document.getElementById('rope-canvas').dataset.layer === '1', rr);
  await page.waitForTimeout(400);
  await waitFor(page, () => document.getElementById('rope-canvas').dataset.head === '2');
  const rope = await page.evaluate(async (t) => (await fetch('/api/rope', { method: 'POST', body: JSON.stringify({ text: t, layer: 1, head: 2, i: 62, j: 3 }) })).json(), text);
  const qv = q.data.subarray(((T - 1) * H + 2) * dh, ((T - 1) * H + 3) * dh), kv = k.data.subarray((3 * nkv + kh) * dh, (3 * nkv + kh + 1) * dh);
  let dc = 0;
  for (let d = 0; d < rope.offsets; d++) dc = Math.max(dc, Math.abs(rope.score[d] - dot(rotate(qv, d, dh, theta), rotate(kv, 0, dh, theta)) / Math.sqrt(dh)));
  check('offset chart = (R_Δ q)·(R_0 k)/√dh computed in JS, every offset', T - 1 === 62 && dc <= 1e-6, `${rope.offsets} offsets, max |Δ| ${dc.toExponential(2)}`);
  check('the curve at Δ = i − j is the forward\'s S[i, j]', Math.abs(rope.S_ij - f.scores[T - 1][3]) === 0 && rope.S_ij_vs_curve <= 1e-6, `S ${rope.S_ij}, |curve − S| ${rope.S_ij_vs_curve}`);
  const rn = await page.$eval('#rope-note', (n) => ({ ...n.dataset, text: n.textContent }));
  check('the page: the score depends on i − j only (key at 0 vs key at ' + rope.shift + ')', rn.relative === 'true' && Number(rn.shiftDiff) <= 1e-6 && rope.shift > 0, `max |Δ| ${rn.shiftDiff}`);
  const flatish = Math.max(...rope.score) - Math.min(...rope.score);
  check('… and it does depend on the offset (not a flat line)', flatish > 1e-3, `range ${flatish.toExponential(2)}`);
  await page.locator('#rope').screenshot({ path: path.join(artifacts, 'qkv-rotary-offset.png') });

  // patching runs on the family model too, and equals the CLI
  await page.locator('#patch').scrollIntoViewIfNeeded();
  await page.fill('#patch-n', '12');
  await page.fill('#patch-hook', 'attn.hook_rot_k');
  await page.click('#patch-run');
  await waitFor(page, () => document.body.dataset.patchDone === '1', null, { timeout: 120000 });
  const g = (await page.$eval('#patch-canvas', (c) => JSON.parse(c.dataset.values || '[]'))).flat();
  const cli = cliJson('patch', '--model', llModel, '--repeated', '12', '--hook', 'attn.hook_rot_k', '--json');
  const d = maxAbs(g, cli.sites.map((s) => s.normalised));
  check('Llama: patching attn.hook_rot_k (2 key heads per layer) equals qkv patch --json', g.length === 4 && d <= 1e-12, `${g.length} cells, max |Δ| ${d}`);
  const pg = await canvasGeom(page, 'patch-canvas');
  await page.mouse.click(...pg.at(1, 1));
  await waitFor(page, () => document.body.dataset.siteReady === '1,1,null', null, { timeout: 60000 });
  const sn = await page.textContent('#site-note');
  check('a key-head site names the query heads reading it (GQA)', /Key\/value head 1 is read by query heads 2, 3/.test(sn), sn.slice(0, 120));
  await page.locator('#patch').screenshot({ path: path.join(artifacts, 'qkv-rotary-patch.png') });
  check('rotary: no console errors or page errors', problems.length === 0, problems.join(' | '));
}

// ---- a family checkpoint without a tokenizer (qwen2): the text boxes take "ids: …" ---------------------
async function noTokenizer(page) {
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  await page.goto(ntUrl);
  await waitFor(page, () => document.body.dataset.ready !== undefined && document.body.dataset.ropeReady !== undefined, null, { timeout: 60000 });
  const text = await page.inputValue('#text');
  const note = await page.textContent('#model-family-note');
  check('no tokenizer (qwen2): ids in the text box, the grid and the offset chart drawn', /^ids: /.test(text) && (await page.$$('#grid canvas')).length === 8 && /no tokenizer/.test(note),
    `${text.slice(0, 30)}…`);
  await page.locator('#patch').scrollIntoViewIfNeeded();
  await page.check('#patch-src-text');
  await page.selectOption('#patch-metric', 'logit_diff');
  await page.fill('#patch-hook', 'attn.hook_q');
  const clean = (await page.inputValue('#patch-clean')).replace(/^ids:\s*/, '').replace(/\s/g, '');
  const corrupt = (await page.inputValue('#patch-corrupt')).replace(/^ids:\s*/, '').replace(/\s/g, '');
  const A = await page.inputValue('#patch-answer'), B = await page.inputValue('#patch-wrong');
  await page.click('#patch-run');
  await waitFor(page, () => document.body.dataset.patchDone === '1', null, { timeout: 120000 });
  const g = (await page.$eval('#patch-canvas', (c) => JSON.parse(c.dataset.values || '[]'))).flat();
  const cli = cliJson('patch', '--model', ntModel, '--clean-tokens', clean, '--corrupt-tokens', corrupt, '--answer', A, '--wrong', B, '--hook', 'attn.hook_q', '--json');
  const d = maxAbs(g, cli.sites.map((x) => x.normalised));
  check('no tokenizer: patching token ids equals qkv patch --clean-tokens … --json', g.length === 8 && d <= 1e-12, `${g.length} cells, max |Δ| ${d}`);
  check('no tokenizer: no console errors or page errors', problems.length === 0, problems.join(' | '));
}

(async () => {
  const { context, close } = await launchChromium();
  const sessions = [['patching', patching], ['rotary', rotary]];
  if (ntModel) sessions.push(['no-tokenizer', noTokenizer]);
  for (const [name, fn] of sessions) {
    const page = await context.newPage();
    try { await fn(page); } catch (e) {
      check(`${name} session`, false, e.stack || String(e));
      await page.screenshot({ path: path.join(artifacts, `qkv-${name}-failure.png`), fullPage: true }).catch(() => {});
    }
    await page.close();
  }
  await close();
  console.log(failures ? `browser: ${failures} check(s) failed` : 'browser: all patching/rotary checks passed');
  process.exit(failures ? 1 : 0);
})();
