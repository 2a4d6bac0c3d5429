// The page of `qkv serve` in a real browser (Debian's chromium, driven by playwright-core): the soft
// dictionary reproduces seed 004 and its "then try" moves; the running example and the whole matrix show
// the numbers `qkv example running|matrix --json` prints; a typed text's pattern, hovered, shows the
// weight the API returns and `qkv dump` writes; the √d_k toggle changes it to the recomputed softmax;
// heads/circuits link to patterns; exports; refusal of a text beyond the context. One line per check.
// Usage: node browser_test.js URL QKV_BINARY MODEL_DIR ARTIFACTS_DIR
'use strict';
const { launchChromium, waitFor } = require('./page_util');
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { readNpy } = require('./npy');

const [url, qkv, model, artifacts] = process.argv.slice(2);
if (!artifacts) { console.error('usage: node browser_test.js URL QKV_BINARY MODEL_DIR ARTIFACTS_DIR'); process.exit(2); }
fs.mkdirSync(artifacts, { recursive: true });

let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} browser: ${name}${detail ? ' — ' + detail : ''}`);
  if (!ok) failures++;
}
const f6 = (v) => Number(v.toPrecision(6)).toString();

(async () => {
  const { context, close } = await launchChromium({ acceptDownloads: true });
  const page = context.pages()[0] || await context.newPage();
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  const offsite = [];
  page.on('request', (r) => { if (!r.url().startsWith(url) && !r.url().startsWith('data:') && !r.url().startsWith('blob:')) offsite.push(r.url()); });
  try {
    await page.goto(url);
    await waitFor(page, () => document.body.dataset.ready !== undefined, null, { timeout: 30000 });
    check('page loads and the first text is drawn', true, await page.textContent('#status'));
    check('model info shown', /2 layers × 4 heads/.test(await page.textContent('#model-info')));

    // ---- soft dictionary: seed 004's numbers and moves ----
    await waitFor(page, () => document.getElementById('sd-output') !== null);
    check('soft dictionary: "bank" leaves as [0.85, 0.15]', (await page.textContent('#sd-output')) === '[0.85, 0.15]', await page.textContent('#sd-output'));
    check('soft dictionary: verdict "the river bank"', (await page.textContent('#sd-verdict')) === 'the river bank');
    const weights = async () => page.$$eval('#sd-steps .bar b', (bs) => bs.map((b) => b.textContent).join(' '));
    check('soft dictionary: weights 0.07 0.31 0.62', (await weights()) === '0.07 0.31 0.62', await weights());
    await page.click('#try-cash');
    await waitFor(page, () => document.getElementById('sd-verdict').textContent === 'the money bank', null, { timeout: 5000 }).catch(() => {});
    check('then try: river → [0, 1] flips the verdict', (await page.textContent('#sd-verdict')) === 'the money bank', await page.textContent('#sd-output'));
    check('then try: … without a weight moving', (await weights()) === '0.07 0.31 0.62', await weights());
    await page.click('#try-q10');
    await waitFor(page, () => [...document.querySelectorAll('#sd-steps .bar b')].map((b) => b.textContent).join(' ') !== '0.07 0.31 0.62', null, { timeout: 5000 }).catch(() => {});
    check('then try: query [1, 0] moves weight off "river"', (await weights()) === '0.40 0.40 0.20', await weights());
    await page.click('#try-q0');
    await waitFor(page, () => [...document.querySelectorAll('#sd-steps .bar b')].map((b) => b.textContent).join(' ') === '0.33 0.33 0.33', null, { timeout: 5000 }).catch(() => {});
    check('then try: query 0 gives a plain average', (await weights()) === '0.33 0.33 0.33', await weights());
    await page.click('#try-reset');
    await page.uncheck('#sd-scale');
    await waitFor(page, () => document.querySelector('#sd-steps .bar b').textContent === '0.04' && document.querySelectorAll('#sd-steps .bar b')[2].textContent === '0.71', null, { timeout: 5000 }).catch(() => {});
    check('soft dictionary: √d_k off sharpens the weights', (await weights()) === '0.04 0.26 0.71', await weights());
    // "drag d_k up": at d_k = 256 the rows are much sharper without √d_k than with it
    await page.click('#sat summary');
    await page.fill('#sat-dk', '8');
    const meanMax = () => page.$eval('#sat-note', (n) => Number(n.dataset.meanMax || 0));
    await waitFor(page, () => /d_k = 256, not divided/.test(document.body.innerText) || document.getElementById('sat-note').dataset.meanMax, null, { timeout: 10000 }).catch(() => {});
    await page.waitForTimeout(300);
    const sharp = await meanMax();
    await page.check('#sd-scale');
    await page.waitForTimeout(500);
    const soft = await meanMax();
    check('d_k = 256: without √d_k the softmax saturates, with it it does not', sharp > 0.8 && soft < sharp - 0.2,
      `mean largest weight ${sharp.toFixed(3)} without, ${soft.toFixed(3)} with`);
    await page.click('#sat summary');

    // ---- seed 004's running example: the page's numbers are the CLI's JSON ----
    const cli = (...args) => JSON.parse(execFileSync(qkv, ['example', ...args, '--json']).toString());
    const reBars = () => page.$$eval('#re-bars .bar', (bs) => bs.map((b) => ({ shown: b.querySelector('b').textContent, value: Number(b.dataset.value) })));
    const reWait = (want) => waitFor(page, (w) => [...document.querySelectorAll('#re-bars .bar b')].map((b) => b.textContent).join(' ') === w, want, { timeout: 20000 }).catch(() => {});
    // A row button is replaced whenever the panel redraws, so a click can land between two draws: click
    // until the row is the followed one.
    const pickRow = async (k) => {
      const sel = `#re-rows button[data-row="${k}"]`;
      for (let t = 0; t < 30 && !(await page.$(sel + '.on')); t++) {
        await page.click(sel);
        await waitFor(page, (q) => !!document.querySelector(q), sel + '.on', { timeout: 1000 }).catch(() => {});
      }
    };
    await page.locator('#running').scrollIntoViewIfNeeded();
    await reWait('0.011 0.035 0.622 0.319 0.014');
    const run = cli('running');
    let rb = await reBars();
    check('running example: the last row shows the seed\'s [0.011, 0.035, 0.622, 0.319, 0.014]',
      rb.map((b) => b.shown).join(' ') === '0.011 0.035 0.622 0.319 0.014', rb.map((b) => b.shown).join(' '));
    check('running example: each weight equals the CLI\'s JSON (exact)', rb.length === 5 && rb.every((b, j) => b.value === run.heads[0].A[4][j]),
      rb.map((b) => b.value).join(' ') + ' vs ' + run.heads[0].A[4].join(' '));
    const reOut = JSON.parse(await page.$eval('#re-output', (e) => e.dataset.value));
    check('running example: Σ a·v equals the CLI\'s O[4]', reOut[0] === run.heads[0].O[4][0] && reOut[1] === run.heads[0].O[4][1], JSON.stringify(reOut));
    const rule = await page.textContent('#re-rule');
    check('running example: the reconstruction of X is stated', /Rows 1-4 are reconstructed/.test(rule) && /21 of 21/.test(rule), rule.slice(0, 80));
    await pickRow(0);
    await reWait('0.008 0.040 0.657 0.285 0.011');
    rb = await reBars();
    check('pick a token: "the" puts 0.66 on ␣climb unmasked (CLI\'s A[0][2])', rb[2].value === run.heads[0].A[0][2] && rb[2].shown === '0.657', rb[2].shown);
    await page.check('#re-masked');
    await reWait('1.000 0.000 0.000 0.000 0.000');
    const runM = cli('running', '--masked');
    rb = await reBars();
    check('causal mask: "the" can only look at itself', rb[0].value === runM.heads[0].A[0][0] && rb[0].value === 1, rb.map((b) => b.shown).join(' '));
    await page.uncheck('#re-masked');
    await page.uncheck('#re-scale');
    await pickRow(4);
    await reWait('0.002 0.012 0.707 0.275 0.003');
    const runN = cli('running', '--no-scale');
    rb = await reBars();
    check('√d_k off: the last row sharpens to the seed\'s [0.002, 0.012, 0.707, 0.275, 0.003] = CLI',
      rb.map((b) => b.shown).join(' ') === '0.002 0.012 0.707 0.275 0.003' && rb.every((b, j) => b.value === runN.heads[0].A[4][j]), rb.map((b) => b.shown).join(' '));
    await page.check('#re-scale');
    await reWait('0.011 0.035 0.622 0.319 0.014');
    await page.selectOption('#re-head', '1');
    await reWait(run.heads[1].A[4].map((v) => v.toFixed(3)).join(' '));
    rb = await reBars();
    check('head 2 (columns 3-4) equals the CLI\'s heads[1]', rb.length === 5 && rb.every((b, j) => b.value === run.heads[1].A[4][j]), rb.map((b) => b.shown).join(' '));
    await page.selectOption('#re-head', '0');

    // ---- the whole matrix: four score functions, √d_k, d_k slider; hovered value = CLI ----
    const sentence = 'The cat sat on the mat because the cat was tired';
    await page.locator('#matrix').scrollIntoViewIfNeeded();
    const wmHover = async (i, j) => {
      const box = await page.locator('#wm-canvas').boundingBox();
      const d = await page.$eval('#wm-canvas', (c) => ({ x0: +c.dataset.x0, y0: +c.dataset.y0, cell: +c.dataset.cell }));
      await page.mouse.move(box.x + d.x0 + (j + 0.5) * d.cell, box.y + d.y0 + (i + 0.5) * d.cell);
      await waitFor(page, ([a, b]) => { const r = document.getElementById('wm-readout').dataset; return r.row === String(a) && r.col === String(b); }, [i, j], { timeout: 5000 });
      return page.$eval('#wm-readout', (r) => ({ value: Number(r.dataset.value), shown: document.getElementById('wm-value').textContent }));
    };
    await waitFor(page, () => document.getElementById('wm-canvas').dataset.score === 'content', null, { timeout: 5000 });
    let wm = await wmHover(8, 1);
    let wmCli = cli('matrix', '--text', sentence, '--score', 'content', '--dk', '2');
    check('whole matrix: hovered weight equals the CLI\'s JSON (content head, cat → cat)', wm.value === wmCli.A[8][1] && wm.shown === f6(wmCli.A[8][1]), `${wm.shown} vs ${wmCli.A[8][1]}`);
    await page.selectOption('#wm-score', 'decay');
    await page.uncheck('#wm-scale');
    await page.fill('#wm-dk', '8');
    await waitFor(page, () => { const c = document.getElementById('wm-canvas').dataset; return c.dk === '256' && c.scale === 'false' && c.score === 'decay'; }, null, { timeout: 5000 });
    const binary = Number(await page.$eval('#wm-note', (n) => n.dataset.binary));
    wmCli = cli('matrix', '--text', sentence, '--score', 'decay', '--dk', '256', '--no-scale');
    wm = await wmHover(3, 3);
    check('d_k = 256 without √d_k: the matrix goes binary (every row > 0.99), as the CLI says', binary === 11 && wmCli.binary_rows === 11 && wm.value === wmCli.A[3][3], `${binary} rows, cell ${wm.shown}`);
    await page.locator('#matrix').screenshot({ path: path.join(artifacts, 'qkv-matrix-binary.png') });
    await page.check('#wm-scale');
    await waitFor(page, () => document.getElementById('wm-canvas').dataset.scale === 'true', null, { timeout: 5000 });
    const wmSoft = Number(await page.$eval('#wm-note', (n) => n.dataset.binary));
    check('… and with √d_k it stays soft at the same d_k', wmSoft === 0, `${wmSoft} binary rows`);
    const wmScaled = cli('matrix', '--text', sentence, '--score', 'decay', '--dk', '256');
    const after = await page.$eval('#wm-readout', (r) => Number(r.dataset.value));
    check('the hovered readout follows the recomputed matrix (no stale value)', after === wmScaled.A[3][3], `${after} vs ${wmScaled.A[3][3]}`);
    await page.mouse.move(0, 0);
    await page.locator('#running').screenshot({ path: path.join(artifacts, 'qkv-running.png') });
    await page.locator('#matrix').screenshot({ path: path.join(artifacts, 'qkv-matrix.png') });

    // A slow answer to an earlier request must not replace a later one's, result or error: the next
    // whole-matrix request is held 1.5 s and answered with an error, the one after it goes through.
    let held = 0;
    await page.route('**/api/whole-matrix', async (route) => {
      if (held++ > 0) return route.continue();
      await new Promise((r) => setTimeout(r, 1500));
      return route.fulfill({ status: 400, contentType: 'application/json', body: JSON.stringify({ error: 'a stale answer' }) });
    });
    await page.selectOption('#wm-score', 'previous');
    await new Promise((r) => setTimeout(r, 300));  // past the panel's 80 ms debounce: two requests
    await page.selectOption('#wm-score', 'mix');
    await waitFor(page, () => document.getElementById('wm-canvas').dataset.score === 'mix', null, { timeout: 20000 }).catch(() => {});
    await new Promise((r) => setTimeout(r, 2000));  // the held answer has arrived by now
    const stale = await page.$eval('#wm-error', (e) => (e.hidden ? '' : e.textContent));
    const wmShown = await page.$eval('#wm-canvas', (c) => c.dataset.score);
    check('a slow, failed earlier request does not replace the later answer', held === 2 && stale === '' && wmShown === 'mix', `${held} requests, error "${stale}", showing ${wmShown}`);
    await page.unroute('**/api/whole-matrix');
    // the browser logs the injected 400 as a console error: that one is expected
    const injected = problems.findIndex((m) => /status of 400/.test(m));
    if (injected >= 0) problems.splice(injected, 1);

    // ---- the model's attention on a typed text ----
    const text = 'the cat sat on the mat';
    const ready = await page.evaluate(() => document.body.dataset.ready);
    await page.fill('#text', text);
    await waitFor(page, (r) => document.body.dataset.ready !== r && document.getElementById('status').textContent.startsWith('22 tokens'), ready, { timeout: 30000 });
    check('typed text: 22 tokens, grid of 2 × 4 patterns', (await page.$$('#grid canvas')).length === 8, await page.textContent('#status'));
    await page.click('#grid canvas[data-layer="1"][data-head="2"]');
    await waitFor(page, () => { const c = document.getElementById('pattern'); return c.dataset.layer === '1' && c.dataset.head === '2'; }, null, { timeout: 30000 });
    check('click a head: layer 1 head 2 enlarged', true);

    const hover = async (i, j) => {
      await page.locator('#pattern').scrollIntoViewIfNeeded();
      const box = await page.locator('#pattern').boundingBox();
      const d = await page.$eval('#pattern', (c) => ({ x0: +c.dataset.x0, y0: +c.dataset.y0, cell: +c.dataset.cell }));
      await page.mouse.move(box.x + d.x0 + (j + 0.5) * d.cell, box.y + d.y0 + (i + 0.5) * d.cell);
      await waitFor(page, ([a, b]) => { const r = document.getElementById('readout').dataset; return r.row === String(a) && r.col === String(b); }, [i, j], { timeout: 5000 });
      return page.$eval('#readout', (r) => ({ ...r.dataset, shown: document.getElementById('readout-value').textContent }));
    };
    const [I, J] = [17, 6];
    const shown = await hover(I, J);
    const apiResp = await page.evaluate(async (t) => (await fetch('/api/attention', { method: 'POST', body: JSON.stringify({ text: t, layer: 1, head: 2, grid: false }) })).json(), text);
    const apiVal = apiResp.focus.pattern[I][J];
    check('hover shows the API\'s weight (exact)', Number(shown.value) === apiVal, `shown ${shown.shown}, data ${shown.value}, API ${apiVal}`);
    check('hover text is that weight to 6 digits', shown.shown === f6(apiVal), shown.shown);

    const dump = fs.mkdtempSync(path.join(os.tmpdir(), 'qkv-dump-'));
    execFileSync(qkv, ['dump', '--model', model, '--text', text, '--out', dump, '--layers', '1']);
    const pat = readNpy(path.join(dump, 'blocks.1.attn.hook_pattern.npy'));
    const T = pat.shape[1];
    const cliVal = pat.data[(2 * T + I) * T + J];
    check('hover shows the CLI\'s weight (qkv dump, float32)', Number(shown.value) === cliVal, `CLI ${cliVal}`);
    let maxDiff = 0;
    for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) maxDiff = Math.max(maxDiff, Math.abs(apiResp.focus.pattern[i][j] - pat.data[(2 * T + i) * T + j]));
    check('API pattern equals qkv dump for every cell of the head', maxDiff === 0, `max |diff| ${maxDiff}`);
    const sc = readNpy(path.join(dump, 'blocks.1.attn.hook_attn_scores.npy'));
    let smax = 0;
    for (let i = 0; i < T; i++) for (let j = 0; j <= i; j++) smax = Math.max(smax, Math.abs(apiResp.focus.scores[i][j] - sc.data[(2 * T + i) * T + j]));
    check('API scores S equal qkv dump\'s hook_attn_scores below the mask', smax === 0, `max |diff| ${smax}`);

    // ---- √d_k off: the recomputed softmax of S·√dh ----
    const before = await page.evaluate(() => document.body.dataset.ready);
    await page.uncheck('#scale');
    await waitFor(page, (r) => document.body.dataset.ready !== r && document.getElementById('pattern').dataset.scale === 'false', before, { timeout: 30000 });
    await page.mouse.move(0, 0);
    const off = await hover(I, J);
    check('√d_k off: the hovered weight changes', Number(off.value) !== Number(shown.value), `${shown.value} → ${off.value}`);
    const dh = 16;
    const row = []; for (let j = 0; j <= I; j++) row.push(sc.data[(2 * T + I) * T + j] * Math.sqrt(dh));
    const mx = Math.max(...row), ex = row.map((v) => Math.exp(v - mx)), sum = ex.reduce((a, b) => a + b, 0);
    const expect = ex[J] / sum;
    check('√d_k off: weight = softmax(S·√d_k) from the CLI\'s scores', Math.abs(Number(off.value) - expect) < 2e-6, `page ${off.value}, from dump ${expect}`);
    await page.check('#scale');
    await waitFor(page, () => document.getElementById('pattern').dataset.scale === 'true', null, { timeout: 30000 });

    // ---- follow a row ----
    await page.selectOption('#follow', String(I));
    const bars = await page.textContent('#row-bars');
    check('pick a token to follow its row', bars.includes(`(row ${I})`), bars.slice(0, 60));

    // ---- heads and circuits ----
    await waitFor(page, () => /head scores on/.test(document.getElementById('heads-status').textContent), null, { timeout: 60000 });
    check('heads & circuits: scores and composition drawn', (await page.$eval('#comp-canvas', (c) => c.width)) > 20);
    // click layer 1, head 3 in the previous-token heatmap: the attention panel shows that head's pattern
    await page.locator('#heads-canvas').scrollIntoViewIfNeeded();
    const hb = await page.locator('#heads-canvas').boundingBox();
    const hd = await page.$eval('#heads-canvas', (c) => ({ x0: +c.dataset.x0, y0: +c.dataset.y0, cell: +c.dataset.cell }));
    await page.mouse.click(hb.x + hd.x0 + 3.5 * hd.cell, hb.y + hd.y0 + 1.5 * hd.cell);
    await waitFor(page, () => { const c = document.getElementById('pattern'); return c.dataset.layer === '1' && c.dataset.head === '3'; }, null, { timeout: 30000 }).catch(() => {});
    const lh = await page.$eval('#pattern', (c) => `layer ${c.dataset.layer}, head ${c.dataset.head}`);
    check('heads & circuits: clicking a head shows its pattern', lh === 'layer 1, head 3', lh + '; ' + await page.textContent('#heads-readout'));
    await page.click('#grid canvas[data-layer="1"][data-head="2"]');
    await waitFor(page, () => { const c = document.getElementById('pattern'); return c.dataset.layer === '1' && c.dataset.head === '2'; }, null, { timeout: 30000 });

    // ---- exports ----
    for (const fmt of ['svg', 'png']) {
      const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 10000 }), page.click(`[data-export="model"][data-format="${fmt}"]`)]);
      const file = path.join(artifacts, `qkv-model.${fmt}`);
      await dl.saveAs(file);
      const head = fs.readFileSync(file).subarray(0, 8);
      const ok = fmt === 'svg' ? head.toString().startsWith('<svg') : head.equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
      check(`export the view as ${fmt.toUpperCase()}`, ok, `${fs.statSync(file).size} bytes → ${file}`);
    }

    await page.mouse.move(0, 0);
    await hover(I, J);
    await page.screenshot({ path: path.join(artifacts, 'qkv-serve.png'), fullPage: true });
    check('screenshot saved', fs.existsSync(path.join(artifacts, 'qkv-serve.png')), path.join(artifacts, 'qkv-serve.png'));

    // ---- a text beyond the context is refused, not truncated ----
    await page.fill('#text', 'x'.repeat(200));
    await waitFor(page, () => !document.getElementById('model-error').hidden, null, { timeout: 10000 }).catch(() => {});
    const err = await page.textContent('#model-error');
    check('text beyond the context: clear refusal', /200 tokens but the model's context is 128 tokens/.test(err), err);

    check('no console errors or page errors', problems.length === 0, problems.join(' | '));
    check('no request left this server', offsite.length === 0, offsite.join(' '));
  } catch (e) {
    check('browser session', false, e.stack || String(e));
    await page.screenshot({ path: path.join(artifacts, 'qkv-serve-failure.png'), fullPage: true }).catch(() => {});
  } finally {
    await close();
  }
  console.log(failures ? `browser: ${failures} check(s) failed` : 'browser: all checks passed');
  process.exit(failures ? 1 : 0);
})();
