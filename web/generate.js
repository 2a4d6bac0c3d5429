// qkv serve's generation view (index.html #generate; POST /api/generate, docs/api.md): the continuation
// streamed token by token, each new token's attention rows (every layer and head, the query that chose
// it) as a grid, and a steered run beside an unsteered one. Uses app.js's helpers ($, el, drawHeatmap,
// CanvasPainter, parseIds, showError); every number comes from the engine.
'use strict';

const GEN = { info: null, runs: [], sel: null, fig: null, abort: null };

// The events of one generation as they arrive (one JSON object per line); HTTP errors come as JSON.
async function genStream(body, onEvent, signal) {
  const r = await fetch('/api/generate', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal });
  if (!r.ok) {
    let j = {};
    try { j = await r.json(); } catch (e) { /* not JSON */ }
    throw new Error(j.error || `HTTP ${r.status}`);
  }
  const reader = r.body.getReader(), dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    for (let k = buf.indexOf('\n'); k >= 0; k = buf.indexOf('\n')) {
      const line = buf.slice(0, k);
      buf = buf.slice(k + 1);
      if (!line) continue;
      const e = JSON.parse(line);
      if (e.event === 'error') throw new Error(e.error);
      onEvent(e);
    }
  }
}

function genRequest(steered) {
  const ids = parseIds($('gen-prompt').value);
  const body = ids ? { ids } : { text: $('gen-prompt').value };
  body.max_new_tokens = Number($('gen-n').value);
  body.temperature = Number($('gen-temp').value);
  body.top_k = Number($('gen-topk').value);
  body.seed = Number($('gen-seed').value);
  if (steered) {
    const lines = (id) => $(id).value.split('\n').map((s) => s.trim()).filter(Boolean);
    body.steer = { hook: $('gen-hook').value, positive: lines('gen-pos'), negative: lines('gen-neg'), coef: Number($('gen-coef').value) };
  }
  return body;
}

// One run's line: its title, the prompt's tokens, the new ones (clickable), and its numbers.
function genRenderRun(k) {
  const run = GEN.runs[k];
  const row = el('div', { class: 'gen-run', 'data-run': String(k) });
  if (run.title) row.append(el('span', { class: 'gen-title', text: run.title }));
  for (const s of run.prompt ? run.prompt.labels : []) row.append(el('span', { class: 'gen-tok prompt', text: s }));
  run.tokens.forEach((t, i) => {
    const sel = GEN.sel && GEN.sel[0] === k && GEN.sel[1] === i;
    row.append(el('span', { class: 'gen-tok new' + (sel ? ' sel' : ''), text: t.label, 'data-step': String(i), title: `token ${t.id}`,
      onclick: () => { GEN.sel = [k, i]; genRender(); } }));
  });
  const d = run.done;
  const st = run.steer ? ` · steered at ${run.steer.hook}, coef ${run.steer.coef}, |v| ${f2(run.steer.norm)}` : '';
  row.append(el('span', { class: 'gen-stats muted', text: d
    ? `${d.tokens.length} new tokens (${d.stop_reason}); prefill ${f2(d.prefill_ms)} ms, ${f2(d.tokens_per_second)} tokens/s${st}`
    : `generating…${st}` }));
  return row;
}

// The grid of the selected token: rows = layer.head, columns = the positions its query attended over.
function genFigure() {
  if (!GEN.sel) return null;
  const run = GEN.runs[GEN.sel[0]], t = run.tokens[GEN.sel[1]];
  if (!run || !t) return null;
  const L = run.prompt.n_layer, H = run.prompt.n_head, n = t.attention[0][0].length;
  const labels = [...run.prompt.labels, ...run.tokens.map((x) => x.label)].slice(0, n);
  const rowLabels = [];
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) rowLabels.push(`L${l}.H${h}`);
  const cell = Math.max(4, Math.min(22, Math.floor(900 / n), Math.floor(560 / (L * H))));
  const spec = { rows: L * H, cols: n, get: (i, j) => t.attention[Math.floor(i / H)][i % H][j], rowLabels, colLabels: labels,
    title: `“${t.label}” (new token ${GEN.sel[1] + 1}${run.title ? ', ' + run.title : ''}) was chosen by the query at position ${t.query} (“${labels[t.query]}”)`,
    rowTitle: 'layer.head', colTitle: 'key position', scale: 'seq', lo: 0, hi: 1, cell };
  const g = layoutHeatmap(spec);
  return { w: g.w, h: g.h, title: spec.title, spec, draw: (p) => { GEN.geom = drawHeatmap(p, 0, 0, spec); } };
}

function genRender() {
  const box = $('gen-runs');
  box.replaceChildren(...GEN.runs.map((_, k) => genRenderRun(k)));
  const fig = genFigure();
  GEN.fig = fig;
  const c = $('gen-canvas');
  if (!fig) { c.hidden = true; return; }
  c.hidden = false;
  fig.draw(new CanvasPainter(c, fig.w, fig.h));
  Object.assign(c.dataset, { run: String(GEN.sel[0]), step: String(GEN.sel[1]), rows: String(fig.spec.rows), cols: String(fig.spec.cols) });
}

async function genRun() {
  if (GEN.abort) GEN.abort.abort();
  const ctrl = new AbortController();
  GEN.abort = ctrl;
  $('gen-error').hidden = true;
  $('gen-run').disabled = true; $('gen-stop').disabled = false;
  const steered = $('gen-steer-on').checked;
  GEN.runs = (steered ? ['steered', 'not steered'] : ['']).map((title) => ({ title, prompt: null, tokens: [], done: null, steer: null }));
  GEN.sel = null;
  $('gen-status').textContent = 'generating…';
  try {
    for (let k = 0; k < GEN.runs.length; k++) {
      const run = GEN.runs[k];
      await genStream(genRequest(steered && k === 0), (e) => {
        if (e.event === 'prompt') { run.prompt = e; run.steer = e.steer; }
        else if (e.event === 'token') {
          run.tokens.push(e);
          if (!GEN.sel || GEN.sel[0] === k) GEN.sel = [k, run.tokens.length - 1];  // follow the newest
        } else if (e.event === 'done') run.done = e;
        genRender();
      }, ctrl.signal);
    }
    $('gen-status').textContent = '';
  } catch (e) {
    if (e.name === 'AbortError') $('gen-status').textContent = 'stopped';
    else { $('gen-status').textContent = ''; showError('gen-error', e.message); }
  } finally {
    if (GEN.abort === ctrl) GEN.abort = null;
    $('gen-run').disabled = false; $('gen-stop').disabled = true;
    genRender();
  }
}

function genReadout(ev) {
  const g = GEN.geom, fig = GEN.fig;
  if (!g || !fig) return;
  const ij = cellAt($('gen-canvas'), g, ev);
  if (!ij) return;
  const [i, j] = ij, s = fig.spec;
  $('gen-readout').textContent = `${s.rowLabels[i]}: attention to position ${j} (“${s.colLabels[j]}”) = ${f6(s.get(i, j))}`;
}

async function genInit() {
  try { GEN.info = await api('/api/info'); } catch (e) { showError('gen-error', e.message); return; }
  const L = GEN.info.config.n_layer, hooks = [];
  for (let l = 0; l < L; l++) hooks.push(`blocks.${l}.hook_resid_pre`);
  hooks.push(`blocks.${L - 1}.hook_resid_post`);
  $('gen-hook').replaceChildren(...hooks.map((h) => el('option', { value: h, text: h })));
  $('gen-hook').value = hooks[Math.floor(L / 2)];
  if (!GEN.info.tokenizer) {
    const V = GEN.info.config.vocab_size, ids = [...Array(8).keys()].map((k) => (7 + 13 * k) % V);
    $('gen-prompt').value = 'ids: ' + [...ids, ...ids.slice(0, 3)].join(', ');
    $('gen-steer-on').disabled = true;
    $('gen-steer-on').parentElement.title = 'steering texts need the model\'s tokenizer';
  }
  $('gen-steer-on').addEventListener('change', () => { $('gen-steer').hidden = !$('gen-steer-on').checked; });
  $('gen-run').addEventListener('click', genRun);
  $('gen-stop').addEventListener('click', () => GEN.abort && GEN.abort.abort());
  $('gen-canvas').addEventListener('mousemove', genReadout);
  $('gen-canvas').hidden = true;
}

genInit();
