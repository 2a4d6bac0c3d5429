// qkv serve's generation view in a real browser (Debian's chromium, playwright-core), on the bundled
// GPT-2 model and a Llama-shaped checkpoint: the tokens the page streams equal `qkv generate --json`'s
// (greedy and sampled with a seed); each new token's attention rows equal `qkv dump`'s full-forward pattern
// of the sequence up to the query that chose it (the cached decode against the uncached forward), every
// row sums to one; with steering, the steered run equals `qkv steer` + `qkv generate --steer` and differs
// from the unsteered run beside it; bad input (too many tokens, an empty steering side) gets a
// clear message and the server stays up. Screenshots in ARTIFACTS_DIR.
// Usage: node generate_test.js QKV_BINARY ARTIFACTS_DIR GPT2_URL GPT2_MODEL LLAMA_URL LLAMA_MODEL
'use strict';
const { launchChromium, waitFor } = require('./page_util');
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { readNpy } = require('./npy');

const [qkv, artifacts, gptUrl, gptModel, llUrl, llModel] = process.argv.slice(2);
if (!llModel) { console.error('usage: node generate_test.js QKV_BINARY ARTIFACTS_DIR GPT2_URL GPT2_MODEL LLAMA_URL LLAMA_MODEL'); process.exit(2); }
fs.mkdirSync(artifacts, { recursive: true });

let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} generate: ${name}${detail ? ' — ' + detail : ''}`);
  if (!ok) failures++;
}
const cliJson = (...args) => JSON.parse(execFileSync(qkv, args, { maxBuffer: 64 << 20 }).toString());
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

async function generateOnPage(page, o) {
  await page.fill('#gen-prompt', o.prompt);
  await page.fill('#gen-n', String(o.n));
  await page.fill('#gen-temp', String(o.temperature || 0));
  await page.fill('#gen-seed', String(o.seed || 0));
  if ((await page.isChecked('#gen-steer-on')) !== !!o.steer) await page.click('#gen-steer-on');
  if (o.steer) {
    await page.selectOption('#gen-hook', o.steer.hook);
    await page.fill('#gen-coef', String(o.steer.coef));
    await page.fill('#gen-pos', o.steer.positive.join('\n'));
    await page.fill('#gen-neg', o.steer.negative.join('\n'));
  }
  await page.click('#gen-run');
  await waitFor(page, () => !document.querySelector('#gen-run').disabled);
  return page.evaluate(() => GEN.runs.map((r) => ({ title: r.title, prompt: r.prompt, tokens: r.tokens, done: r.done })));
}

// The attention rows of every new token against the full forward of the sequence up to its query.
function attentionAgainstDump(model, run, L) {
  const seq = [...run.prompt.ids, ...run.tokens.map((t) => t.id)];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qkv-gen-dump-'));
  execFileSync(qkv, ['dump', '--model', model, '--tokens', seq.slice(0, -1).join(','), '--out', dir]);
  let worst = 0, sumErr = 0;
  for (let l = 0; l < L; l++) {
    const p = readNpy(path.join(dir, `blocks.${l}.attn.hook_pattern.npy`));  // [H, T, T]
    const [H, T] = p.shape;
    for (const t of run.tokens) {
      const i = t.query;
      for (let h = 0; h < H; h++) {
        const row = t.attention[l][h];
        if (row.length !== i + 1) return { worst: Infinity, sumErr: Infinity };
        let s = 0;
        for (let j = 0; j <= i; j++) { worst = Math.max(worst, Math.abs(row[j] - p.data[(h * T + i) * T + j])); s += row[j]; }
        sumErr = Math.max(sumErr, Math.abs(s - 1));
      }
    }
  }
  fs.rmSync(dir, { recursive: true, force: true });
  return { worst, sumErr };
}

async function session(page, url, model, name, o) {
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 400/.test(m.text())) problems.push('console: ' + m.text()); });
  await page.goto(url);
  await waitFor(page, () => GEN.info !== null && document.querySelector('#gen-hook').options.length > 0);
  await page.locator('#generate').scrollIntoViewIfNeeded();

  // greedy: the page's tokens = qkv generate --json's; the attention rows = the full forward's pattern
  const runs = await generateOnPage(page, { prompt: o.prompt, n: o.n });
  const cli = cliJson('generate', '--model', model, '--text', o.prompt, '--max-new-tokens', String(o.n), '--json');
  const got = runs[0].done ? runs[0].done.tokens : null;
  check(`${name}: greedy tokens equal qkv generate --json`, same(got, cli.tokens), `page ${JSON.stringify(got)}, cli ${JSON.stringify(cli.tokens)}`);
  check(`${name}: one streamed token event per new token`, runs[0].tokens.length === cli.tokens.length && same(runs[0].tokens.map((t) => t.id), cli.tokens));
  const L = runs[0].prompt.n_layer;
  const a = attentionAgainstDump(model, runs[0], L);
  check(`${name}: every new token's attention rows equal qkv dump's full-forward pattern (to the 3 decimals sent)`, a.worst <= 6e-4, `max |Δ| ${a.worst}`);
  check(`${name}: every row sums to one`, a.sumErr <= 0.01 * runs[0].tokens[0].attention[0][0].length, `max |Σ − 1| ${a.sumErr}`);
  const grid = await page.$eval('#gen-canvas', (c) => ({ hidden: c.hidden, rows: +c.dataset.rows, cols: +c.dataset.cols, step: +c.dataset.step }));
  const last = runs[0].tokens[runs[0].tokens.length - 1];
  check(`${name}: the grid shows the newest token: layers × heads rows, its query's positions as columns`,
    !grid.hidden && grid.rows === L * runs[0].prompt.n_head && grid.cols === last.query + 1 && grid.step === runs[0].tokens.length - 1, JSON.stringify(grid));
  await page.locator('#generate').screenshot({ path: path.join(artifacts, `qkv-generate-${name}.png`) });

  // clicking an earlier token selects it
  await page.click('#gen-runs .gen-run[data-run="0"] .gen-tok.new[data-step="1"]');
  const g1 = await page.$eval('#gen-canvas', (c) => ({ step: +c.dataset.step, cols: +c.dataset.cols }));
  check(`${name}: clicking new token 2 shows its row`, g1.step === 1 && g1.cols === runs[0].tokens[1].query + 1, JSON.stringify(g1));

  // sampled with a seed: the page equals the CLI
  const sr = await generateOnPage(page, { prompt: o.prompt, n: 6, temperature: 0.9, seed: 7 });
  const sc = cliJson('generate', '--model', model, '--text', o.prompt, '--max-new-tokens', '6', '--temperature', '0.9', '--seed', '7', '--json');
  check(`${name}: sampled (temperature 0.9, seed 7) equals the CLI`, sr[0].done && same(sr[0].done.tokens, sc.tokens), `${JSON.stringify(sr[0].done && sr[0].done.tokens)} vs ${JSON.stringify(sc.tokens)}`);

  // steering: the steered run = qkv steer + qkv generate --steer; the unsteered one beside it = plain
  const st = o.steer;
  const vdir = fs.mkdtempSync(path.join(os.tmpdir(), 'qkv-gen-steer-'));
  const vfile = path.join(vdir, 'v.npy');
  execFileSync(qkv, ['steer', '--model', model, '--hook', st.hook, '--out', vfile, ...st.positive.flatMap((t) => ['--positive', t]), ...st.negative.flatMap((t) => ['--negative', t])]);
  const steeredCli = cliJson('generate', '--model', model, '--text', o.prompt, '--max-new-tokens', String(o.n), '--steer', `${st.hook}:${vfile}:${st.coef}`, '--json');
  fs.rmSync(vdir, { recursive: true, force: true });
  const s2 = await generateOnPage(page, { prompt: o.prompt, n: o.n, steer: st });
  check(`${name}: steering shows a steered and an unsteered run`, s2.length === 2 && s2[0].title === 'steered' && s2[1].title === 'not steered');
  check(`${name}: the steered run equals qkv steer + qkv generate --steer`, s2[0].done && same(s2[0].done.tokens, steeredCli.tokens), `${JSON.stringify(s2[0].done && s2[0].done.tokens)} vs ${JSON.stringify(steeredCli.tokens)}`);
  check(`${name}: the unsteered run equals the plain greedy run`, s2[1].done && same(s2[1].done.tokens, cli.tokens));
  check(`${name}: steering changed the continuation`, s2[0].done && !same(s2[0].done.tokens, s2[1].done.tokens));
  await page.locator('#generate').screenshot({ path: path.join(artifacts, `qkv-generate-${name}-steered.png`) });

  // bad input: a clear message, and the server still answers
  await page.fill('#gen-neg', '');
  await page.click('#gen-run');
  await waitFor(page, () => !document.querySelector('#gen-error').hidden);
  const e1 = await page.textContent('#gen-error');
  check(`${name}: an empty steering side is refused with a message`, /negative.*non-empty list/.test(e1), e1);
  await page.click('#gen-steer-on');
  await page.fill('#gen-n', '100000');
  await page.click('#gen-run');
  await waitFor(page, () => !document.querySelector('#gen-error').hidden && /max_new_tokens/.test(document.querySelector('#gen-error').textContent));
  check(`${name}: too many new tokens is refused with the limit`, /outside \[1, \d+\]/.test(await page.textContent('#gen-error')));
  const info = await page.evaluate(() => fetch('/api/info').then((r) => r.status));
  check(`${name}: the server still answers`, info === 200);
  check(`${name}: no console errors or page errors`, problems.length === 0, problems.join(' | '));
}

(async () => {
  const { context, close } = await launchChromium({ viewport: { width: 1280, height: 1000 } });
  const cases = [
    [gptUrl, gptModel, 'gpt2', { prompt: 'The cat sat on the mat. The dog ran. The cat sat', n: 12,
      steer: { hook: 'blocks.1.hook_resid_pre', coef: 6, positive: ['abcabc', 'the cat'], negative: ['xyz xyz'] } }],
    [llUrl, llModel, 'llama', { prompt: 'The cat sat on the mat. The cat', n: 10,
      steer: { hook: 'blocks.1.hook_resid_pre', coef: 8, positive: ['abc abc'], negative: ['zzz'] } }],
  ];
  for (const [url, model, name, o] of cases) {
    const page = await context.newPage();
    try { await session(page, url, model, name, o); } catch (e) {
      check(`${name} session`, false, e.stack || String(e));
      await page.screenshot({ path: path.join(artifacts, `qkv-generate-${name}-failure.png`), fullPage: true }).catch(() => {});
    }
    await page.close();
  }
  await close();
  console.log(failures ? `generate: ${failures} check(s) failed` : 'generate: all generation-view checks passed');
  process.exit(failures ? 1 : 0);
})();
