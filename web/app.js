// qkv serve's page: five panels over the JSON API (docs/api.md). No dependencies, no network beyond
// this server. Every number shown comes from the engine; the page only lays it out and colours it.
'use strict';

// ---- small helpers ---------------------------------------------------------------------------------

const $ = (id) => document.getElementById(id);
const el = (tag, props = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};

async function api(path, body) {
  const opts = body === undefined ? {} : { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) };
  const r = await fetch(path, opts);
  let j;
  try { j = await r.json(); } catch (e) { throw new Error(`${path}: HTTP ${r.status}, not JSON`); }
  if (!r.ok) throw new Error(j.error || `HTTP ${r.status}`);
  return j;
}

// Requests of one panel are numbered: `const current = latest('panel')` before a request, and the answer
// (a result or an error) is shown only if current() is still true, i.e. no later request of that panel was
// made meanwhile — responses can arrive out of order, and a slow stale one must not overwrite a newer one.
const latest = (() => {
  const last = {};
  return (key) => { const n = (last[key] = (last[key] || 0) + 1); return () => last[key] === n; };
})();

function debounce(fn, ms) {
  let t = 0;
  return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
}

// Numbers as the seed writes them (2 decimals) and as a hover shows them (6 significant digits).
const f2 = (v) => (v === null || v === undefined ? '—' : Math.abs(v) >= 1e4 ? v.toExponential(2) : v.toFixed(2));
const f6 = (v) => (v === null || v === undefined ? '—' : Number(v.toPrecision(6)).toString());
const vec = (a) => '[' + a.map(f2).join(', ') + ']';

function showError(id, msg) {
  const e = $(id);
  if (!msg) { e.hidden = true; e.textContent = ''; return; }
  e.hidden = false; e.textContent = msg;
}

// ---- colours (the same maps as the SVG reports: report/svg.hpp) -----------------------------------

const hexRgb = (h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16));
const VIRIDIS = ['#440154', '#472d7b', '#3b528b', '#2c728e', '#21918c', '#28ae80', '#5ec962', '#addc30', '#fde725'].map(hexRgb);
const RDBU = ['#053061', '#2166ac', '#4393c3', '#92c5de', '#f7f7f7', '#f4a582', '#d6604d', '#b2182b', '#67001f'].map(hexRgb);
const MASKED = [227, 227, 227];
function ramp(stops, t) {
  if (!(t >= 0)) t = 0;
  if (t > 1) t = 1;
  const x = t * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2), u = x - i;
  return stops[i].map((c, k) => Math.round(c + (stops[i + 1][k] - c) * u));
}
const seqColor = (v, lo, hi) => ramp(VIRIDIS, (v - lo) / (hi - lo || 1));
const divColor = (v, m) => ramp(RDBU, 0.5 + 0.5 * (v / (m || 1)));
const css = (rgb) => `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;
const lum = (rgb) => (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255;

// ---- painters: one drawing code for the screen (canvas), PNG export (canvas) and SVG export ----------

class CanvasPainter {
  constructor(canvas, w, h, scale) {
    const dpr = scale || window.devicePixelRatio || 1;
    canvas.width = Math.ceil(w * dpr); canvas.height = Math.ceil(h * dpr);
    canvas.style.width = w + 'px'; canvas.style.height = h + 'px';
    this.ctx = canvas.getContext('2d');
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.ctx.fillStyle = '#fff'; this.ctx.fillRect(0, 0, w, h);
  }
  rect(x, y, w, h, fill, stroke, lw = 1) {
    const c = this.ctx;
    if (fill) { c.fillStyle = fill; c.fillRect(x, y, w, h); }
    if (stroke) { c.strokeStyle = stroke; c.lineWidth = lw; c.strokeRect(x, y, w, h); }
  }
  text(x, y, s, o = {}) {
    const c = this.ctx;
    c.save();
    c.font = `${o.bold ? '600 ' : ''}${o.size || 11}px system-ui, "DejaVu Sans", Arial, sans-serif`;
    c.fillStyle = o.color || '#1d1f24';
    c.textAlign = o.anchor === 'middle' ? 'center' : o.anchor === 'end' ? 'right' : 'left';
    c.textBaseline = 'middle';
    c.translate(x, y);
    if (o.rotate) c.rotate((o.rotate * Math.PI) / 180);
    c.fillText(s, 0, 0);
    c.restore();
  }
  line(pts, color, width = 1.5, dash = null) {
    const c = this.ctx;
    c.save(); c.strokeStyle = color; c.lineWidth = width; c.setLineDash(dash || []);
    c.beginPath();
    pts.forEach(([x, y], k) => (k ? c.lineTo(x, y) : c.moveTo(x, y)));
    c.stroke(); c.restore();
  }
  dot(x, y, r, fill) {
    const c = this.ctx;
    c.save(); c.fillStyle = fill; c.beginPath(); c.arc(x, y, r, 0, 2 * Math.PI); c.fill(); c.restore();
  }
  cells(x, y, cw, ch, rows, cols, colorAt) {
    const off = document.createElement('canvas');
    off.width = cols; off.height = rows;
    const octx = off.getContext('2d'), img = octx.createImageData(cols, rows);
    for (let i = 0; i < rows; i++)
      for (let j = 0; j < cols; j++) {
        const c = colorAt(i, j), k = 4 * (i * cols + j);
        img.data[k] = c[0]; img.data[k + 1] = c[1]; img.data[k + 2] = c[2]; img.data[k + 3] = 255;
      }
    octx.putImageData(img, 0, 0);
    this.ctx.imageSmoothingEnabled = false;
    this.ctx.drawImage(off, x, y, cols * cw, rows * ch);
  }
}

const xmlEsc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
const r1 = (v) => Math.round(v * 10) / 10;

class SvgPainter {
  constructor(w, h, title) { this.w = w; this.h = h; this.title = title; this.parts = []; }
  rect(x, y, w, h, fill, stroke, lw = 1) {
    this.parts.push(`<rect x="${r1(x)}" y="${r1(y)}" width="${r1(w)}" height="${r1(h)}" fill="${fill || 'none'}"${stroke ? ` stroke="${stroke}" stroke-width="${lw}"` : ''}/>`);
  }
  text(x, y, s, o = {}) {
    const anchor = o.anchor === 'middle' ? 'middle' : o.anchor === 'end' ? 'end' : 'start';
    const rot = o.rotate ? ` transform="rotate(${o.rotate} ${r1(x)} ${r1(y)})"` : '';
    this.parts.push(`<text x="${r1(x)}" y="${r1(y)}" font-size="${o.size || 11}" fill="${o.color || '#1d1f24'}" text-anchor="${anchor}" dominant-baseline="middle"${o.bold ? ' font-weight="600"' : ''}${rot}>${xmlEsc(s)}</text>`);
  }
  line(pts, color, width = 1.5, dash = null) {
    this.parts.push(`<polyline fill="none" stroke="${color}" stroke-width="${width}"${dash ? ` stroke-dasharray="${dash.join(' ')}"` : ''} points="${pts.map(([x, y]) => `${r1(x)},${r1(y)}`).join(' ')}"/>`);
  }
  dot(x, y, r, fill) { this.parts.push(`<circle cx="${r1(x)}" cy="${r1(y)}" r="${r}" fill="${fill}"/>`); }
  cells(x, y, cw, ch, rows, cols, colorAt, titleAt) {
    if (rows * cols > 128 * 128) {  // a picture, not a million <rect>s
      const c = document.createElement('canvas');
      c.width = cols; c.height = rows;
      const ctx = c.getContext('2d'), img = ctx.createImageData(cols, rows);
      for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
        const v = colorAt(i, j), k = 4 * (i * cols + j);
        img.data[k] = v[0]; img.data[k + 1] = v[1]; img.data[k + 2] = v[2]; img.data[k + 3] = 255;
      }
      ctx.putImageData(img, 0, 0);
      this.parts.push(`<image x="${r1(x)}" y="${r1(y)}" width="${r1(cols * cw)}" height="${r1(rows * ch)}" preserveAspectRatio="none" style="image-rendering:pixelated" href="${c.toDataURL('image/png')}"/>`);
      return;
    }
    for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
      const t = titleAt ? `<title>${xmlEsc(titleAt(i, j))}</title>` : '';
      this.parts.push(`<rect x="${r1(x + j * cw)}" y="${r1(y + i * ch)}" width="${r1(cw)}" height="${r1(ch)}" fill="${css(colorAt(i, j))}">${t}</rect>`);
    }
  }
  toString() {
    return `<svg xmlns="http://www.w3.org/2000/svg" width="${this.w}" height="${this.h}" viewBox="0 0 ${this.w} ${this.h}" font-family="system-ui, 'DejaVu Sans', Arial, sans-serif" role="img" aria-label="${xmlEsc(this.title)}">\n<rect width="100%" height="100%" fill="#fff"/>\n${this.parts.join('\n')}\n</svg>\n`;
  }
}

// ---- one heatmap: labels on both axes, masked cells grey, optional numbers, highlighted row/cell -----

const textW = (s, size) => [...s].length * size * 0.58;

// spec: rows, cols, get(i,j), masked(i,j)?, rowLabels?, colLabels?, title?, rowTitle?, colTitle?,
// scale 'seq'|'div', lo/hi (seq) or m (div), cell, showValues, hlRow, hlCell [i,j], fmt.
function layoutHeatmap(spec) {
  const fs = spec.cell < 9 ? 9 : spec.cell < 14 ? 10 : 11;
  const every = Math.max(1, Math.ceil(12 / spec.cell));
  const rl = spec.rowLabels || [], cl = spec.colLabels || [];
  const lw = rl.length ? Math.min(110, Math.max(...rl.map((s) => textW(s, fs)))) + 8 : 0;
  const lh = cl.length ? Math.min(90, Math.max(...cl.map((s) => textW(s, fs)))) * 0.87 + 10 : 0;
  const x0 = (spec.rowTitle ? 16 : 2) + lw, y0 = (spec.title ? 22 : 4) + (spec.colTitle ? 16 : 0) + lh;
  const w = x0 + spec.cols * spec.cell + 8, h = y0 + spec.rows * spec.cell + 6;
  return { x0, y0, cw: spec.cell, ch: spec.cell, w: Math.max(w, spec.title ? textW(spec.title, 13) + 8 : 0), h, fs, every, lw, lh };
}

function drawHeatmap(p, ox, oy, spec) {
  const g = layoutHeatmap(spec);
  const X = ox + g.x0, Y = oy + g.y0, c = spec.cell;
  const color = (i, j) => {
    if (spec.masked && spec.masked(i, j)) return MASKED;
    const v = spec.get(i, j);
    if (v === null || !isFinite(v)) return MASKED;
    return spec.scale === 'div' ? divColor(v, spec.m) : seqColor(v, spec.lo ?? 0, spec.hi ?? 1);
  };
  if (spec.title) p.text(ox + 2, oy + 10, spec.title, { size: 13, bold: true });
  if (spec.colTitle) p.text(X + (spec.cols * c) / 2, oy + (spec.title ? 22 : 4) + 6, spec.colTitle, { size: 11, anchor: 'middle', color: '#5f6672' });
  if (spec.rowTitle) p.text(ox + 8, Y + (spec.rows * c) / 2, spec.rowTitle, { size: 11, anchor: 'middle', color: '#5f6672', rotate: -90 });
  p.cells(X, Y, c, c, spec.rows, spec.cols, color, spec.titleAt);
  const rl = spec.rowLabels || [], cl = spec.colLabels || [];
  for (let i = 0; i < rl.length; i += g.every) p.text(X - 4, Y + (i + 0.5) * c, clip(rl[i]), { size: g.fs, anchor: 'end', color: spec.hlRow === i ? '#d0215f' : '#1d1f24', bold: spec.hlRow === i });
  for (let j = 0; j < cl.length; j += g.every) p.text(X + (j + 0.5) * c, Y - 4, clip(cl[j]), { size: g.fs, rotate: -60, color: spec.hlCell && spec.hlCell[1] === j ? '#d0215f' : '#1d1f24' });
  if (spec.showValues && c >= 34)
    for (let i = 0; i < spec.rows; i++) for (let j = 0; j < spec.cols; j++) {
      if (spec.masked && spec.masked(i, j)) continue;
      const v = spec.get(i, j), col = color(i, j);
      p.text(X + (j + 0.5) * c, Y + (i + 0.5) * c, (spec.fmt || f2)(v), { size: 11, anchor: 'middle', color: lum(col) > 0.45 ? '#111' : '#fff' });
    }
  if (spec.hlRow !== undefined && spec.hlRow >= 0) p.rect(X - 1, Y + spec.hlRow * c - 1, spec.cols * c + 2, c + 2, null, '#ff3d7f', 2);
  if (spec.hlCell) p.rect(X + spec.hlCell[1] * c, Y + spec.hlCell[0] * c, c, c, null, '#ffffff', 1.5);
  return { x0: X - ox, y0: Y - oy, cw: c, ch: c, w: g.w, h: g.h, rows: spec.rows, cols: spec.cols };
}
const clip = (s) => ([...s].length > 16 ? [...s].slice(0, 15).join('') + '…' : s);

function cellAt(canvas, geom, ev) {
  const r = canvas.getBoundingClientRect();
  const x = ev.clientX - r.left - geom.x0, y = ev.clientY - r.top - geom.y0;
  const i = Math.floor(y / geom.ch), j = Math.floor(x / geom.cw);
  return i >= 0 && j >= 0 && i < geom.rows && j < geom.cols ? [i, j] : null;
}

function download(name, blob) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

// A figure = {w, h, title, draw(painter)}; exported as SVG or PNG (2× pixels).
function exportFigure(fig, name, format) {
  if (!fig) return;
  if (format === 'svg') {
    const p = new SvgPainter(Math.ceil(fig.w), Math.ceil(fig.h), fig.title);
    fig.draw(p);
    download(name + '.svg', new Blob([p.toString()], { type: 'image/svg+xml' }));
  } else {
    const c = document.createElement('canvas');
    const p = new CanvasPainter(c, Math.ceil(fig.w), Math.ceil(fig.h), 2);
    fig.draw(p);
    c.toBlob((b) => download(name + '.png', b), 'image/png');
  }
}

// ---- panel 1: the soft dictionary (seed 004) --------------------------------------------------------

const SD = { ex: null, names: [], Q: [], K: [], V: [], row: 1, res: null, dims: ['river', 'money'] };

function sdInput(kind, i, k) {
  const inp = el('input', { type: 'number', step: '0.1', class: kind === 'Q' ? 'q' : '', 'aria-label': `${kind} ${SD.names[i]} ${k}` });
  inp.value = SD[kind][i][k];
  inp.dataset.kind = kind; inp.dataset.i = i; inp.dataset.k = k;
  inp.addEventListener('input', () => {
    const v = parseFloat(inp.value);
    if (Number.isFinite(v)) { SD[kind][i][k] = v; sdCompute(); }
  });
  return inp;
}

function sdTable() {
  const t = $('sd-table');
  t.replaceChildren();
  const dk = SD.K[0].length, dv = SD.V[0].length;
  t.append(el('tr', {}, el('th', { text: 'token' }), el('th', { text: 'query q', colspan: dk, class: 'group' }),
    el('th', { text: 'key k', colspan: dk, class: 'group' }), el('th', { text: `value v [${SD.dims.join(', ')}]`, colspan: dv, class: 'group' })));
  SD.names.forEach((n, i) => {
    const tr = el('tr', { class: i === SD.row ? 'followed' : '' }, el('td', { class: 'name', text: n }));
    for (let k = 0; k < dk; k++) { const td = el('td', k === 0 ? { class: 'group' } : {}, sdInput('Q', i, k)); tr.append(td); }
    for (let k = 0; k < dk; k++) tr.append(el('td', k === 0 ? { class: 'group' } : {}, sdInput('K', i, k)));
    for (let k = 0; k < dv; k++) tr.append(el('td', k === 0 ? { class: 'group' } : {}, sdInput('V', i, k)));
    t.append(tr);
  });
  const seg = $('sd-rows');
  seg.replaceChildren(...SD.names.map((n, i) => el('button', { type: 'button', class: i === SD.row ? 'on' : '', text: n, onclick: () => { SD.row = i; sdTable(); sdRender(); } })));
}

const sdCompute = debounce(async () => {
  const current = latest('sd');
  try {
    const res = await api('/api/soft-dictionary', { names: SD.names, Q: SD.Q, K: SD.K, V: SD.V, scale: $('sd-scale').checked });
    if (!current()) return;
    SD.res = res;
    showError('sd-error', '');
    sdRender();
  } catch (e) { if (current()) showError('sd-error', e.message); }
}, 60);

function sdRender() {
  const r = SD.res;
  if (!r) return;
  const i = SD.row, name = SD.names[i], q = SD.Q[i];
  const ol = $('sd-steps');
  const vals = (a) => el('span', { class: 'vals' }, ...a.map((v) => el('span', { text: f2(v), title: String(v) })));
  const li = (num, what, ...body) => el('li', {}, el('span', { class: 'num', text: num }), el('span', { class: 'what', text: what }), ...body);
  const scaled = r.scale;
  const sum = r.exp_scores[i].reduce((a, b) => a + b, 0);
  const bars = el('span', { class: 'bars' }, ...r.weights[i].map((w, j) => {
    const b = el('i');
    b.style.height = Math.max(1, Math.round(w * 60)) + 'px';
    return el('span', { class: 'bar', title: `${SD.names[j]}: ${w}` }, el('b', { text: f2(w) }), b, el('span', { text: SD.names[j] }));
  }));
  const out = r.output[i];
  const dims = SD.dims;
  let verdict = '';
  if (out && out.length === 2) {
    const wins = out[0] >= out[1] ? 0 : 1;
    verdict = name === 'bank' ? `the ${dims[wins]} bank` : `leans ${dims[wins]}`;
  }
  const vd = el('span', { class: 'verdict ' + (out && out[0] >= out[1] ? 'river' : 'money'), id: 'sd-verdict', text: verdict });
  ol.replaceChildren(
    li('①', `scores q·k (q of “${name}” = ${vec(q)})`, vals(r.scores[i])),
    li('②', scaled ? `scaled ÷ √d_k = ÷ ${f2(r.sqrt_dk)}` : 'not scaled (√d_k off)', vals(r.scaled[i])),
    li('③', `softmax: e^score / ${f2(sum)}`, el('span', { class: 'muted', text: 'e^ = ' }), vals(r.exp_scores[i]), bars),
    li('④', 'mix: Σ a·v', el('span', { id: 'sd-output', text: vec(out) }), el('span', { text: ' → ' }), vd),
  );
  // A and O for every query, as a figure
  SD.fig = sdFigure();
  const g = SD.fig;
  const c = $('sd-canvas');
  g.draw(new CanvasPainter(c, g.w, g.h));
  sdSaturation();
}

function sdFigure() {
  const r = SD.res, n = SD.names.length, dv = SD.V[0].length;
  const A = { rows: n, cols: n, get: (i, j) => r.weights[i][j], rowLabels: SD.names.map((s) => 'q ' + s), colLabels: SD.names.map((s) => 'k ' + s),
    title: 'A = softmax(' + (r.scale ? 'QKᵀ/√d_k' : 'QKᵀ') + ')', scale: 'seq', lo: 0, hi: 1, cell: 46, showValues: true, hlRow: SD.row };
  const O = { rows: n, cols: dv, get: (i, j) => r.output[i][j], rowLabels: SD.names, colLabels: SD.dims, title: 'O = A·V', scale: 'seq', lo: 0, hi: 1, cell: 46, showValues: true, hlRow: SD.row };
  const ga = layoutHeatmap(A), go = layoutHeatmap(O);
  const h = Math.max(ga.h, go.h);
  return { w: ga.w + 30 + go.w, h, title: 'soft dictionary', draw: (p) => { drawHeatmap(p, 0, h - ga.h, A); drawHeatmap(p, ga.w + 30, h - go.h, O); } };
}

function sdLoad(ex) {
  SD.ex = ex;
  SD.names = ex.names.slice(); SD.dims = ex.value_dims;
  SD.Q = ex.Q.map((r) => r.slice()); SD.K = ex.K.map((r) => r.slice()); SD.V = ex.V.map((r) => r.slice());
  SD.row = ex.query_row;
  $('sd-scale').checked = ex.scale;
  sdTable(); sdCompute();
}

function sdTry(fn) { fn(); sdTable(); sdCompute(); }

// Random queries and keys with a growing d_k: the scores spread as √d_k and the softmax saturates.
let satTimer = 0;
function gaussians(n, seed) {
  let s = seed >>> 0;
  const u = () => { s = (s * 1664525 + 1013904223) >>> 0; return (s + 0.5) / 4294967296; };
  const out = [];
  while (out.length < n) { const a = Math.sqrt(-2 * Math.log(u())), b = 2 * Math.PI * u(); out.push(a * Math.cos(b), a * Math.sin(b)); }
  return out.slice(0, n).map((v) => Math.round(v * 1000) / 1000);
}
function sdSaturation() {
  if (!$('sat').open) return;
  clearTimeout(satTimer);
  satTimer = setTimeout(async () => {
    const dk = 2 ** Number($('sat-dk').value), n = 6;
    $('sat-dk-out').textContent = dk;
    const g = gaussians(2 * n * dk, 7);
    const Q = [], K = [];
    for (let i = 0; i < n; i++) { Q.push(g.slice(i * dk, (i + 1) * dk)); K.push(g.slice((n + i) * dk, (n + i + 1) * dk)); }
    const current = latest('sat');
    try {
      const r = await api('/api/soft-dictionary', { Q, K, scale: $('sd-scale').checked });
      if (!current()) return;
      const labels = [...Array(n).keys()].map((i) => 't' + (i + 1));
      const spec = { rows: n, cols: n, get: (i, j) => r.weights[i][j], rowLabels: labels, colLabels: labels, title: `A, d_k = ${dk}, ${r.scale ? 'divided by √d_k' : 'not divided'}`, scale: 'seq', lo: 0, hi: 1, cell: 40, showValues: true };
      const gl = layoutHeatmap(spec);
      drawHeatmap(new CanvasPainter($('sat-canvas'), gl.w, gl.h), 0, 0, spec);
      const maxes = r.weights.map((row) => Math.max(...row));
      const sd = Math.sqrt(r.scaled.flat().reduce((a, v) => a + v * v, 0) / (n * n));
      const mean = maxes.reduce((a, b) => a + b, 0) / n, hard = maxes.filter((m) => m > 0.9).length;
      $('sat-note').textContent = `score spread (rms) ${f2(sd)}; largest weight per row: ${maxes.map(f2).join(', ')} (mean ${f2(mean)}); ` +
        `${hard} of ${n} rows put more than 0.9 on one key` + (hard >= n / 2 ? ' — close to a hard argmax, where the gradient through the softmax is ≈ 0.' : '.');
      $('sat-note').dataset.meanMax = String(mean);
      showError('sd-error', '');
    } catch (e) { if (current()) showError('sd-error', e.message); }
  }, 60);
}

// ---- panel: seed 004's running example "the cat climbed the" ------------------------------------------

const RE = { res: null, row: 4, head: 0, fig: null, geom: null };
const f3 = (v) => (v === null || v === undefined ? '—' : v.toFixed(3));
const vec3 = (a) => '[' + a.map(f3).join(', ') + ']';
const cols = (p) => '[' + p.map((c) => 'u' + c).join(', ') + ']';

const reLoad = debounce(async () => {
  const current = latest('re');
  try {
    const res = await api('/api/running-example', { scale: $('re-scale').checked, masked: $('re-masked').checked });
    if (!current()) return;
    RE.res = res;
    showError('re-error', '');
    reRender();
  } catch (e) { if (current()) showError('re-error', e.message); }
}, 40);

function reRender() {
  const r = RE.res;
  if (!r) return;
  const h = r.heads[RE.head], i = RE.row, toks = r.tokens;
  $('re-rows').replaceChildren(...toks.map((t, k) => el('button', { type: 'button', class: k === i ? 'on' : '', text: `${k + 1} ${t}`,
    'data-row': k, onclick: () => { RE.row = k; reRender(); } })));
  const t = $('re-table');
  t.replaceChildren(el('tr', {}, el('th', { text: 'token' }), el('th', { text: 'X' }), el('th', { text: 'σ' }), el('th', { text: 'u = LayerNorm(X)', class: 'group' }),
    el('th', { text: `q ${cols(h.picks.q)}`, class: 'group' }), el('th', { text: `k ${cols(h.picks.k)}` }), el('th', { text: `v ${cols(h.picks.v)}` }), el('th', { text: 'row of X', class: 'group' })));
  toks.forEach((tok, k) => t.append(el('tr', { class: k === i ? 'followed' : '' },
    el('td', { class: 'name', text: tok }), el('td', { class: 'num', text: '[' + r.X[k].join(', ') + ']' }), el('td', { class: 'num', text: f3(r.sigma[k]) }),
    el('td', { class: 'num group', text: vec3(r.u[k]) }), el('td', { class: 'num group', text: vec3(h.Q[k]) }), el('td', { class: 'num', text: vec3(h.K[k]) }),
    el('td', { class: 'num', text: vec3(h.V[k]) }), el('td', { class: 'src group', text: r.from_seed[k] ? 'the seed’s' : 'reconstructed' }))));
  const masked = (j) => r.masked && j > i;
  const vals = (a, fmt) => el('span', { class: 'vals' }, ...a.map((v, j) => el('span', { text: masked(j) ? 'masked' : fmt(v), title: String(v) })));
  const li = (num, what, ...body) => el('li', {}, el('span', { class: 'num', text: num }), el('span', { class: 'what', text: what }), ...body);
  const bars = el('span', { class: 'bars', id: 're-bars' }, ...h.A[i].map((w, j) => {
    const b = el('i');
    b.style.height = Math.max(1, Math.round(w * 60)) + 'px';
    return el('span', { class: 'bar', 'data-value': String(w), 'data-col': j, title: `${toks[j]}: ${w}` }, el('b', { text: f3(w) }), b, el('span', { text: toks[j] }));
  }));
  $('re-steps').replaceChildren(
    li('①', `scores q·k (q of “${toks[i]}” = ${vec3(h.Q[i])})`, vals(h.QK[i], f3)),
    li('②', r.scale ? 'scaled ÷ √d_k = ÷ 1.414' : 'not scaled (√d_k off)', vals(h.S[i], f3)),
    li('③', 'softmax' + (r.masked ? ' over the tokens up to this one' : ''), bars),
    li('④', 'mix: Σ a·v', el('span', { id: 're-output', 'data-value': JSON.stringify(h.O[i]), text: vec3(h.O[i]) })),
  );
  const ok = r.checks.filter((c) => c.ok).length;
  $('re-rule').textContent = `X: ${r.rule} Head 2's picks are qkv's (the seed puts head 2 on its next page without giving them). ` +
    `${ok} of ${r.checks.length} numbers the seed states match to its rounding.`;
  $('re-caption').textContent = `A (head ${RE.head + 1}, ${r.scale ? '÷√d_k' : 'not divided'}, ${r.masked ? 'causal mask' : 'unmasked'}): row ${i + 1} followed; O = A·V.`;
  RE.fig = reFigure();
  const g = RE.fig;
  g.draw(new CanvasPainter($('re-canvas'), g.w, g.h));
}

function reFigure() {
  const r = RE.res, h = r.heads[RE.head], n = r.tokens.length;
  const A = { rows: n, cols: n, get: (i, j) => h.A[i][j], masked: (i, j) => r.masked && j > i, rowLabels: r.tokens, colLabels: r.tokens,
    title: 'A = softmax(' + (r.scale ? 'QKᵀ/√d_k' : 'QKᵀ') + ')', scale: 'seq', lo: 0, hi: 1, cell: 44, showValues: true, hlRow: RE.row, fmt: f3 };
  const O = { rows: n, cols: 2, get: (i, j) => h.O[i][j], rowLabels: r.tokens, colLabels: h.picks.v.map((c) => 'u' + c), title: 'O = A·V', scale: 'div', m: 2, cell: 44, showValues: true, hlRow: RE.row, fmt: f3 };
  const ga = layoutHeatmap(A), go = layoutHeatmap(O);
  const hh = Math.max(ga.h, go.h);
  return { w: ga.w + 24 + go.w, h: hh, title: 'running example', draw: (p) => { drawHeatmap(p, 0, hh - ga.h, A); drawHeatmap(p, ga.w + 24, hh - go.h, O); } };
}

// ---- panel: the whole matrix under four score functions ---------------------------------------------

const WM = { res: null, geom: null, fig: null, hover: null };

const wmLoad = debounce(async () => {
  const dk = 2 ** Number($('wm-dk').value);
  $('wm-dk-out').textContent = dk;
  const current = latest('wm');
  try {
    const res = await api('/api/whole-matrix', { text: $('wm-text').value, score: $('wm-score').value, d_k: dk,
      scale: $('wm-scale').checked, masked: $('wm-masked').checked });
    if (!current()) return;
    WM.res = res;
    showError('wm-error', '');
    wmRender();
  } catch (e) { if (current()) showError('wm-error', e.message); }
}, 80);

function wmSpec(hl) {
  const r = WM.res, n = r.tokens.length;
  const cell = Math.max(16, Math.min(44, Math.floor(560 / n)));
  return { rows: n, cols: n, get: (i, j) => r.A[i][j], masked: (i, j) => r.masked && j > i, rowLabels: r.tokens, colLabels: r.tokens,
    title: `A, head “${r.score}”, d_k = ${r.d_k}, ${r.scale ? 'divided by √d_k' : 'not divided'}`, scale: 'seq', lo: 0, hi: 1, cell, showValues: true, hlCell: hl };
}

function wmRender(hl) {
  const r = WM.res;
  if (!r) return;
  const spec = wmSpec(hl);
  const g = layoutHeatmap(spec);
  WM.fig = { w: g.w, h: g.h, title: 'whole matrix', draw: (p) => drawHeatmap(p, 0, 0, spec) };
  const c = $('wm-canvas');
  WM.geom = drawHeatmap(new CanvasPainter(c, g.w, g.h), 0, 0, spec);
  c.dataset.x0 = WM.geom.x0; c.dataset.y0 = WM.geom.y0; c.dataset.cell = WM.geom.cw;
  c.dataset.dk = r.d_k; c.dataset.scale = String(r.scale); c.dataset.score = r.score;
  const n = r.tokens.length, mean = r.row_max.reduce((a, b) => a + b, 0) / n;
  $('wm-note').textContent = `largest weight per row: mean ${f2(mean)}; ${r.binary_rows} of ${n} rows put more than 0.99 on one token` +
    (r.binary_rows * 2 >= n ? ' — the matrix has gone binary: a hard argmax, where the gradient through the softmax is ≈ 0.' : '.');
  $('wm-note').dataset.binary = String(r.binary_rows);
  wmReadout();
}

function wireMatrix() {
  const c = $('wm-canvas');
  c.addEventListener('mousemove', (ev) => {
    if (!WM.res || !WM.geom) return;
    const x = cellAt(c, WM.geom, ev);
    if (!x) return;
    WM.hover = x;
    wmReadout();
  });
  for (const id of ['wm-text', 'wm-dk']) $(id).addEventListener('input', wmLoad);
  for (const id of ['wm-score', 'wm-scale', 'wm-masked']) $(id).addEventListener('change', wmLoad);
}

// The hovered cell's numbers, refreshed when the matrix is recomputed (never a stale value).
function wmReadout() {
  const r = WM.res, ro = $('wm-readout');
  if (!r || !WM.hover || WM.hover[0] >= r.tokens.length || WM.hover[1] >= r.tokens.length) {
    WM.hover = null; delete ro.dataset.row; delete ro.dataset.col; delete ro.dataset.value;
    ro.textContent = 'hover a cell';
    return;
  }
  {
    const [i, j] = WM.hover, v = r.A[i][j];
    ro.dataset.row = i; ro.dataset.col = j; ro.dataset.value = String(v);
    ro.replaceChildren(el('span', { text: `row ${i} “${r.tokens[i]}” → “${r.tokens[j]}”: weight ` }), el('b', { id: 'wm-value', text: f6(v) }),
      el('span', { text: `  (score S = ${f6(r.S[i][j])}, z = ${f6(r.z[i][j])})` }));
  }
}

// ---- panel 2: the model's attention ----------------------------------------------------------------

const M = { info: null, input: null, grid: null, focus: null, layer: 0, head: 0, follow: -1, hover: null, geom: null, sgeom: null, tgeom: null, seq: 0 };

// "ids: 1, 2, 3" in a text box means token ids (a model without a tokenizer; any model): the list, else null.
function parseIds(text) {
  const m = /^\s*ids\s*:\s*([\d,\s]*)$/.exec(text);
  return m ? m[1].split(/[\s,]+/).filter(Boolean).map(Number) : null;
}

// Key j is hidden from query i by the causal mask, or by the layer's sliding window (i − w < j ≤ i visible).
function hidden(layer, i, j) {
  const w = M.info && M.info.config && M.info.config.window ? M.info.config.window[layer] || 0 : 0;
  return j > i || (w > 0 && j <= i - w);
}

function modelInput() {
  if (M.input && M.input.ids) return { ids: M.input.ids };
  const ids = parseIds($('text').value);
  return ids ? { ids } : { text: $('text').value };
}

const onText = debounce(async () => {
  M.input = null;
  const current = latest('text');
  const text = $('text').value;
  const ids = parseIds(text);
  if (ids) {
    const P = M.info.config.n_positions;
    $('tok-count').textContent = `${ids.length} / ${P} token ids`;
    $('tok-count').className = ids.length <= P ? 'muted' : 'error';
    loadAttention(true);  // the server checks the ids and the length
    return;
  }
  try {
    const t = await api('/api/tokenize', { text });
    if (!current()) return;
    $('tok-count').textContent = `${t.count} / ${t.n_positions} tokens`;
    $('tok-count').className = t.fits ? 'muted' : 'error';
    if (t.fits && t.count > 0) loadAttention(true);
    else if (!t.fits) showError('model-error', `the text is ${t.count} tokens but the model's context is ${t.n_positions} tokens; shorten it (nothing is truncated)`);
  } catch (e) { if (current()) showError('model-error', e.message); }
}, 250);

async function loadAttention(withGrid) {
  const seq = ++M.seq;
  const body = { ...modelInput(), scale: $('scale').checked, layer: M.layer, head: M.head, grid: withGrid, swap_check: true };
  $('status').textContent = 'computing…';
  try {
    const r = await api('/api/attention', body);
    if (seq !== M.seq) return;  // a newer request superseded this one
    showError('model-error', '');
    if (withGrid) {
      M.grid = r;
      const sel = $('follow'), keep = M.follow < r.T ? M.follow : -1;
      sel.replaceChildren(el('option', { value: '-1', text: '(none)' }), ...r.tokens.map((t, i) => el('option', { value: String(i), text: `${i}: ${t}` })));
      sel.value = String(keep); M.follow = keep;
      drawGrid();
    }
    M.focus = r;
    M.focus.tokens = r.tokens;
    drawFocus();
    $('status').textContent = `${r.T} tokens · ${r.n_layer} layers × ${r.n_head} heads · head dim ${r.head_dim}`;
    document.body.dataset.ready = String(M.seq);
    if (withGrid) ropeTokens();
  } catch (e) {
    if (seq !== M.seq) return;
    $('status').textContent = '';
    showError('model-error', e.message);
  }
}

function drawGrid() {
  const r = M.grid, g = r.grid, box = $('grid');
  const px = Math.max(48, Math.min(96, Math.floor(880 / r.n_head) - 8));
  box.style.gridTemplateColumns = `auto repeat(${r.n_head}, ${px + 4}px)`;
  const kids = [el('span')];
  for (let h = 0; h < r.n_head; h++) kids.push(el('span', { class: 'lab', text: 'head ' + h }));
  for (let l = 0; l < r.n_layer; l++) {
    kids.push(el('span', { class: 'lab', text: 'layer ' + l }));
    for (let h = 0; h < r.n_head; h++) {
      const c = el('canvas', { 'data-layer': l, 'data-head': h, title: `layer ${l}, head ${h}: click to enlarge` });
      if (l === M.layer && h === M.head) c.classList.add('sel');
      const m = g.layers[l][h], n = g.size, cell = px / n;
      const p = new CanvasPainter(c, px, px);
      p.cells(0, 0, cell, cell, n, n, (i, j) => (g.exact && hidden(l, i, j) ? MASKED : seqColor(m[i][j], 0, 1)));
      c.addEventListener('click', () => focusHead(l, h, false));
      kids.push(c);
    }
  }
  box.replaceChildren(...kids);
}

function focusHead(l, h, scroll) {
  M.layer = l; M.head = h;
  document.querySelectorAll('#grid canvas').forEach((c) => c.classList.toggle('sel', +c.dataset.layer === l && +c.dataset.head === h));
  if (scroll) $('model').scrollIntoView({ behavior: 'smooth' });
  loadAttention(!M.grid);
}

function patternSpec(cell) {
  const f = M.focus.focus, tok = M.focus.tokens, T = M.focus.T;
  return { rows: T, cols: T, get: (i, j) => f.pattern[i][j], masked: (i, j) => hidden(f.layer, i, j), rowLabels: tok, colLabels: tok,
    title: `layer ${f.layer}, head ${f.head}: pattern A${M.focus.scale ? '' : ' (not divided by √d_k)'}`, rowTitle: 'query', colTitle: 'key',
    scale: 'seq', lo: 0, hi: 1, cell, showValues: true, hlRow: M.follow, hlCell: M.hover, fmt: f2,
    titleAt: (i, j) => `${tok[i]} → ${tok[j]}: ${hidden(f.layer, i, j) ? 'masked' : f.pattern[i][j]}` };
}

function scoreSpecs(cell) {
  const f = M.focus.focus, tok = M.focus.tokens, T = M.focus.T;
  let m = 0;
  for (const row of f.scores) for (const v of row) m = Math.max(m, Math.abs(v));
  const rot = M.focus.rotary, qk = rot ? '(R_i q_i)·(R_j k_j)' : 'qkᵀ';
  const sqrtDk = Math.abs(M.focus.attn_scale * Math.sqrt(M.focus.head_dim) - 1) < 1e-9;  // the seeds' 1/√d_k
  const name = !rot && sqrtDk ? (M.focus.scale ? 'S = qkᵀ/√d_k' : 'S = qkᵀ (no √d_k)')
    : M.focus.scale ? `S = ${f6(M.focus.attn_scale)}·${qk}` : `S = ${qk} (no scale)`;
  const base = { rows: T, cols: T, rowLabels: tok, colLabels: tok, scale: 'div', m, cell, showValues: true, fmt: (v) => v.toFixed(1) };
  return [
    { ...base, get: (i, j) => f.scores[i][j], title: name + ', unmasked', rowTitle: 'query i', colTitle: 'key j', titleAt: (i, j) => `S[${i},${j}] ${tok[i]} → ${tok[j]}: ${f.scores[i][j]}` },
    { ...base, get: (i, j) => f.scores[j][i], title: 'Sᵀ (the transpose)', rowTitle: 'i', colTitle: 'j', titleAt: (i, j) => `Sᵀ[${i},${j}] = S[${j},${i}]: ${f.scores[j][i]}` },
  ];
}

function focusCell(T, target) { return Math.max(2, Math.min(34, Math.floor(target / T))); }

function drawFocus() {
  const r = M.focus;
  if (!r || !r.focus) return;
  const T = r.T, c = $('pattern');
  const spec = patternSpec(focusCell(T, 560));
  const g = layoutHeatmap(spec);
  M.geom = drawHeatmap(new CanvasPainter(c, g.w, g.h), 0, 0, spec);
  Object.assign(c.dataset, { x0: M.geom.x0, y0: M.geom.y0, cell: M.geom.cw, t: T, layer: r.focus.layer, head: r.focus.head, scale: String(r.scale) });
  const [s, st] = scoreSpecs(focusCell(T, 300));
  const gs = layoutHeatmap(s);
  M.sgeom = drawHeatmap(new CanvasPainter($('scores'), gs.w, gs.h), 0, 0, s);
  M.tgeom = drawHeatmap(new CanvasPainter($('scores-t'), gs.w, gs.h), 0, 0, st);
  for (const [id, g] of [['scores', M.sgeom], ['scores-t', M.tgeom]]) Object.assign($(id).dataset, { x0: g.x0, y0: g.y0, cell: g.cw, layer: r.focus.layer, head: r.focus.head });
  const a = r.focus.max_asymmetry;
  $('asym').textContent = `‖S − Sᵀ‖ / ‖S‖ = ${f2(r.focus.asymmetry)}; the largest gap: S[${a.i},${a.j}] (${r.tokens[a.i]} → ${r.tokens[a.j]}) = ${f2(r.focus.scores[a.i][a.j])}` +
    ` but S[${a.j},${a.i}] = ${f2(r.focus.scores[a.j][a.i])}. Masking keeps the lower triangle (j ≤ i): the query “asks”, the key “answers”, and the two roles are not interchangeable.` +
    (r.rotary ? ' On this rotary model S is computed from the ROTATED q and k (hook_rot_q, hook_rot_k), exactly the pairs the softmax reads.' : '') +
    (r.focus.window > 0 ? ` At this layer the sliding window of ${r.focus.window} also hides every key more than ${r.focus.window - 1} positions back (grey in the pattern).` : '');
  const sw = r.focus.swap, swp = $('swap');
  if (sw) {
    swp.textContent = `Swap the roles: recompute S with W_Q ↔ W_K (and their biases${r.rotary ? ', each side rotated at its own position' : ''}) and it ` +
      (sw.transposes ? `equals Sᵀ (max |S' − Sᵀ| = ${sw.max_abs_diff.toExponential(1)}, |S| up to ${f2(sw.max_abs_S)}): the swap transposes the matrix, it does not leave it alone.`
        : `does NOT equal Sᵀ (max |S' − Sᵀ| = ${f6(sw.max_abs_diff)}).`);
    Object.assign(swp.dataset, { maxAbsDiff: String(sw.max_abs_diff), transposes: String(sw.transposes), asymmetry: String(sw.asymmetry) });
  } else { swp.textContent = ''; }
  drawRowBars();
}

function drawRowBars() {
  const box = $('row-bars'), i = M.follow, r = M.focus;
  if (!r || !r.focus || i < 0 || i >= r.T) { box.replaceChildren(); return; }
  const row = r.focus.pattern[i].slice(0, i + 1).map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 8);
  box.replaceChildren(el('div', { class: 'muted', text: `where “${r.tokens[i]}” (row ${i}) looks, largest weights first:` }),
    ...row.map(([w, j]) => {
      const b = el('i'); b.style.width = Math.max(1, Math.round(w * 300)) + 'px';
      return el('div', { class: 'rb' }, el('span', { class: 't', text: `${j}: ${r.tokens[j]}` }), b, el('span', { text: f6(w) }));
    }));
}

function setReadout(i, j) {
  const r = M.focus, ro = $('readout');
  if (i === null) { ro.textContent = 'hover a cell'; delete ro.dataset.value; return; }
  const masked = hidden(r.focus.layer, i, j), v = r.focus.pattern[i][j];
  ro.replaceChildren(el('span', { text: `query ${i} “${r.tokens[i]}” → key ${j} “${r.tokens[j]}”: ` }),
    el('b', { id: 'readout-value', text: masked ? 'masked (0)' : f6(v) }),
    el('span', { class: 'muted', text: `   S = ${f6(r.focus.scores[i][j])}` }));
  Object.assign(ro.dataset, { row: i, col: j, value: String(v), layer: r.focus.layer, head: r.focus.head, scale: String(r.scale) });
}

function wireFocus() {
  const c = $('pattern');
  c.addEventListener('mousemove', (ev) => {
    if (!M.geom) return;
    const ij = cellAt(c, M.geom, ev);
    const key = ij ? ij.join(',') : '';
    if (key === (M.hover ? M.hover.join(',') : '')) return;
    M.hover = ij;
    setReadout(ij ? ij[0] : null, ij ? ij[1] : null);
    redrawPatternOnly();
  });
  c.addEventListener('mouseleave', () => { M.hover = null; redrawPatternOnly(); });
  c.addEventListener('click', (ev) => {
    const ij = M.geom && cellAt(c, M.geom, ev);
    if (!ij) return;
    M.follow = ij[0]; $('follow').value = String(ij[0]);
    redrawPatternOnly(); drawRowBars();
  });
  for (const [id, which] of [['scores', 'sgeom'], ['scores-t', 'tgeom']]) {
    const s = $(id);
    s.addEventListener('mousemove', (ev) => {
      const ij = M[which] && cellAt(s, M[which], ev);
      if (!ij) return;
      const [i, j] = ij, f = M.focus.focus, tok = M.focus.tokens;
      const v = which === 'sgeom' ? f.scores[i][j] : f.scores[j][i];
      Object.assign($('scores-readout').dataset, { which: which === 'sgeom' ? 'S' : 'ST', i: String(i), j: String(j), value: String(v) });
      $('scores-readout').textContent = which === 'sgeom'
        ? `S[${i},${j}] (“${tok[i]}” asks, “${tok[j]}” answers) = ${f6(v)};  S[${j},${i}] = ${f6(f.scores[j][i])}`
        : `Sᵀ[${i},${j}] = S[${j},${i}] (“${tok[j]}” asks, “${tok[i]}” answers) = ${f6(v)}`;
    });
  }
}

function redrawPatternOnly() {
  if (!M.focus || !M.focus.focus) return;
  const spec = patternSpec(M.geom.cw), g = layoutHeatmap(spec);
  drawHeatmap(new CanvasPainter($('pattern'), g.w, g.h), 0, 0, spec);
}

function modelFigure() {
  if (!M.focus || !M.focus.focus) return null;
  const T = M.focus.T, ps = patternSpec(focusCell(T, 560));
  ps.hlCell = null;
  const [s, st] = scoreSpecs(focusCell(T, 300));
  const gp = layoutHeatmap(ps), gs = layoutHeatmap(s);
  const h = Math.max(gp.h, gs.h);
  return { w: gp.w + 24 + 2 * gs.w + 16, h, title: `attention: layer ${M.focus.focus.layer}, head ${M.focus.focus.head}`,
    draw: (p) => { drawHeatmap(p, 0, 0, ps); drawHeatmap(p, gp.w + 24, 0, s); drawHeatmap(p, gp.w + 24 + gs.w + 16, 0, st); } };
}

// ---- rotary positions: one q/k pair's score against the offset i − j -----------------------------------

const RO = { res: null, geom: null, seq: 0, fig: null };

function ropeSelects() {
  const c = M.info.config;
  const fill = (id, n, lab) => { const s = $(id); s.replaceChildren(...[...Array(n).keys()].map((k) => el('option', { value: String(k), text: lab(k) }))); };
  fill('rope-layer', c.n_layer, (l) => String(l));
  fill('rope-head', c.n_head, (h) => c.n_kv_head < c.n_head ? `${h} (key head ${Math.floor(h / (c.n_head / c.n_kv_head))})` : String(h));
}

// The token selects follow the attention panel's text: i the last token, j the first.
function ropeTokens() {
  if (!M.info || !M.info.features || !M.info.features.rope || !M.grid) return;
  const tok = M.grid.tokens, T = tok.length;
  for (const id of ['rope-i', 'rope-j']) $(id).replaceChildren(...tok.map((t, k) => el('option', { value: String(k), text: `${k}: ${t}` })));
  $('rope-i').value = String(T - 1); $('rope-j').value = String(0);
  ropeLoad();
}

const ropeLoad = debounce(async () => {
  const seq = ++RO.seq;
  const body = { ...modelInput(), layer: Number($('rope-layer').value), head: Number($('rope-head').value), i: Number($('rope-i').value), j: Number($('rope-j').value) };
  $('rope-status').textContent = 'computing…';
  try {
    const r = await api('/api/rope', body);
    if (seq !== RO.seq) return;
    RO.res = r; showError('rope-error', '');
    drawRope();
    $('rope-status').textContent = '';
    document.body.dataset.ropeReady = String(seq);
  } catch (e) { if (seq === RO.seq) { $('rope-status').textContent = ''; showError('rope-error', e.message); } }
}, 120);

function ropeFigure() {
  const r = RO.res;
  if (!r) return null;
  const W = 820, H = 330, x0 = 64, y0 = 30, w = W - x0 - 190, h = H - y0 - 46;
  const all = [...r.score, ...r.score_shifted, r.unrotated];
  if (r.S_ij !== undefined) all.push(r.S_ij);
  let lo = Math.min(...all), hi = Math.max(...all);
  if (hi - lo < 1e-9) { lo -= 1; hi += 1; }
  const pad = 0.06 * (hi - lo); lo -= pad; hi += pad;
  const n = r.offsets, X = (d) => x0 + (d / (n - 1)) * w, Y = (v) => y0 + h - ((v - lo) / (hi - lo)) * h;
  const geom = { x0, y0, w, h, n, X, Y, lo, hi };
  return { w: W, h: H, geom, title: `rotary score vs offset: layer ${r.layer}, head ${r.head}`, draw: (p) => {
    p.text(4, 12, `layer ${r.layer}, head ${r.head}: score of q(“${r.tokens[r.i]}”, token ${r.i}) with k(“${r.tokens[r.j]}”, token ${r.j}) placed Δ apart`, { size: 13, bold: true });
    p.rect(x0, y0, w, h, null, '#c9ccd3', 1);
    // round ticks: a step of 1, 2 or 5 × 10^k, about five of them, labelled with the step's decimals
    const raw = (hi - lo) / 5, p10 = Math.pow(10, Math.floor(Math.log10(raw)));
    const ystep = [1, 2, 5, 10].map((m) => m * p10).find((s) => s >= raw);
    const dec = Math.max(0, -Math.floor(Math.log10(ystep) + 1e-9));
    for (let v = Math.ceil(lo / ystep) * ystep; v <= hi + 1e-12; v += ystep) {
      const y = Y(v), lab = Math.abs(v) < ystep / 2 ? '0' : v.toFixed(dec);
      p.line([[x0 - 4, y], [x0, y]], '#888', 1);
      p.text(x0 - 6, y, lab, { size: 10, anchor: 'end', color: '#5f6672' });
    }
    const step = Math.max(1, Math.pow(10, Math.floor(Math.log10(n / 2))));
    const tick = n / step > 8 ? step * (n / step > 20 ? 5 : 2) : step;
    for (let d = 0; d < n; d += tick) { p.line([[X(d), y0 + h], [X(d), y0 + h + 4]], '#888', 1); p.text(X(d), y0 + h + 12, String(d), { size: 10, anchor: 'middle', color: '#5f6672' }); }
    p.text(x0 + w / 2, y0 + h + 30, 'offset Δ = i − j (query position − key position)', { size: 11, anchor: 'middle', color: '#5f6672' });
    p.text(14, y0 + h / 2, 'score S', { size: 11, anchor: 'middle', color: '#5f6672', rotate: -90 });
    if (lo < 0 && hi > 0) p.line([[x0, Y(0)], [x0 + w, Y(0)]], '#e0e0e0', 1);
    p.line([[x0, Y(r.unrotated)], [x0 + w, Y(r.unrotated)]], '#9a9a9a', 1.2, [5, 4]);
    p.line(r.score.map((v, d) => [X(d), Y(v)]), '#2c5fa8', 1.8);
    p.line(r.score_shifted.map((v, d) => [X(d), Y(v)]), '#e08a1e', 1.4, [6, 5]);
    if (r.text_offset !== undefined && r.text_offset < n) p.dot(X(r.text_offset), Y(r.S_ij), 4.5, '#d0215f');
    const lx = x0 + w + 14;
    p.line([[lx, y0 + 8], [lx + 24, y0 + 8]], '#2c5fa8', 1.8); p.text(lx + 30, y0 + 8, 'key at position 0', { size: 11 });
    p.line([[lx, y0 + 28], [lx + 24, y0 + 28]], '#e08a1e', 1.4, [6, 5]); p.text(lx + 30, y0 + 28, `key at position ${r.shift}`, { size: 11 });
    p.line([[lx, y0 + 48], [lx + 24, y0 + 48]], '#9a9a9a', 1.2, [5, 4]); p.text(lx + 30, y0 + 48, 'no rotation: q·k', { size: 11 });
    if (r.text_offset !== undefined) { p.dot(lx + 12, y0 + 68, 4.5, '#d0215f'); p.text(lx + 30, y0 + 68, `S[${r.i},${r.j}] in the text`, { size: 11 }); }
  } };
}

function drawRope() {
  const fig = ropeFigure();
  RO.fig = fig;
  if (!fig) return;
  const c = $('rope-canvas');
  fig.draw(new CanvasPainter(c, fig.w, fig.h));
  RO.geom = fig.geom;
  const r = RO.res;
  const rel = r.max_abs_shift_diff <= 1e-4 * Math.max(1, r.max_abs_score);
  $('rope-note').textContent = `Rotary dims ${r.rotary_dim} of head dim ${r.head_dim}, θ = ${r.rope_theta}${r.rope_scaling ? ', scaling ' + r.rope_scaling : ''}, scale ${f6(r.attn_scale)}. ` +
    `The two curves (key at position 0 and at position ${r.shift}) differ by at most ${r.max_abs_shift_diff.toExponential(1)}: ` +
    (rel ? 'the score depends on the offset i − j only, not on where the pair sits.' : 'they differ: not a function of i − j alone.') +
    (r.text_offset !== undefined ? ` At Δ = ${r.text_offset} the curve gives the forward's own S[${r.i},${r.j}] = ${f6(r.S_ij)} (|Δ| ${r.S_ij_vs_curve === null ? '—' : r.S_ij_vs_curve.toExponential(1)}).` : ' (j > i: the mask hides this pair in the text.)') +
    ` Without rotation the score would stay at ${f6(r.unrotated)} whatever the offset.`;
  Object.assign($('rope-note').dataset, { shiftDiff: String(r.max_abs_shift_diff), relative: String(rel) });
  Object.assign(c.dataset, { n: String(r.offsets), layer: String(r.layer), head: String(r.head) });
}

function wireRope() {
  for (const id of ['rope-layer', 'rope-head', 'rope-i', 'rope-j']) $(id).addEventListener('change', ropeLoad);
  const c = $('rope-canvas');
  c.addEventListener('mousemove', (ev) => {
    const g = RO.geom, r = RO.res;
    if (!g || !r) return;
    const b = c.getBoundingClientRect(), x = ev.clientX - b.left;
    const d = Math.round(((x - g.x0) / g.w) * (g.n - 1));
    if (d < 0 || d >= g.n) return;
    $('rope-readout').textContent = `Δ = ${d}: score ${f6(r.score[d])} (key at 0), ${f6(r.score_shifted[d])} (key at ${r.shift}); without rotation ${f6(r.unrotated)}`;
    $('rope-readout').dataset.offset = String(d); $('rope-readout').dataset.value = String(r.score[d]);
  });
}

// ---- activation patching ------------------------------------------------------------------------------

const PA = { res: null, req: null, geom: null, site: null, seq: 0, timer: 0, fig: null, siteFig: null };

const PATCH_HOOKS = ['attn.hook_q', 'attn.hook_k', 'attn.hook_v', 'attn.hook_z', 'attn.hook_result', 'attn.hook_pattern', 'attn.hook_attn_scores',
  'attn.hook_rot_q', 'attn.hook_rot_k', 'hook_resid_pre', 'hook_resid_mid', 'hook_resid_post', 'hook_attn_out', 'hook_mlp_out', 'mlp.hook_pre', 'mlp.hook_pre_linear', 'mlp.hook_post'];

function patchRequest() {
  const rep = $('patch-src-rep').checked;
  const body = { hook: $('patch-hook').value.trim(), direction: $('patch-dir').value, per_position: $('patch-perpos').checked };
  if (rep) { body.repeated = Number($('patch-n').value); body.seed = Number($('patch-seed').value); } else {
    for (const k of ['clean', 'corrupt']) {
      const v = $('patch-' + k).value, ids = parseIds(v);
      if (ids) body[k + '_ids'] = ids; else body[k] = v;
    }
  }
  const metric = $('patch-metric').value;
  body.metric = metric;
  const tokenArg = (v) => (/^\d+$/.test(v.trim()) ? Number(v.trim()) : v);
  if (metric === 'logit_diff') { body.answer = tokenArg($('patch-answer').value); body.wrong = tokenArg($('patch-wrong').value); body.position = Number($('patch-pos').value); }
  else {
    const lp = $('patch-lp').value.trim();
    if (lp) {
      const out = [];
      for (const part of lp.split(',')) {
        const m = /^\s*(\d+)\s*(?:-\s*(\d+))?\s*$/.exec(part);
        if (!m) throw new Error(`positions: '${part}' is not a position or a range like 9-12`);
        const a = Number(m[1]), b = m[2] === undefined ? a : Number(m[2]);
        if (b < a || b - a > 4096) throw new Error(`positions: '${part}' is not a forward range`);
        for (let k = a; k <= b; k++) out.push(k);
      }
      body.loss_positions = out;
    }
  }
  return body;
}

function patchMode() {
  const rep = $('patch-src-rep').checked, ld = $('patch-metric').value === 'logit_diff';
  $('patch-texts').hidden = rep; $('patch-rep').hidden = !rep;
  $('patch-ld').hidden = !ld; $('patch-lossp').hidden = ld;
  if (!rep) patchCount();
}

const patchCount = debounce(async () => {
  if (!M.info) return;
  for (const k of ['clean', 'corrupt']) {
    const ids = parseIds($('patch-' + k).value);
    if (ids) { $(`patch-${k}-n`).textContent = `${ids.length} token ids`; continue; }
    if (!M.info.tokenizer) { $(`patch-${k}-n`).textContent = 'no tokenizer: “ids: …”'; continue; }
    try {
      const t = await api('/api/tokenize', { text: $('patch-' + k).value });
      $(`patch-${k}-n`).textContent = `${t.count} tokens`;
    } catch (e) { $(`patch-${k}-n`).textContent = ''; }
  }
}, 250);

async function patchRun() {
  let body;
  try { body = patchRequest(); } catch (e) { showError('patch-error', e.message); return; }
  const seq = ++PA.seq, t0 = performance.now();
  const btn = $('patch-run'), st = $('patch-status');
  btn.disabled = true; st.classList.add('busy');
  document.body.dataset.patchBusy = '1';
  // the server reports the sweep's progress under a job name while the request runs
  const job = `p${seq}-${Math.floor(Math.random() * 1e9)}`;
  let prog = '';
  const tick = () => { st.textContent = `running the sweep… ${prog}${((performance.now() - t0) / 1000).toFixed(1)} s`; };
  const poll = async () => {
    try {
      const p = await api('/api/patch-progress', { job });
      if (p.running && seq === PA.seq) { prog = `site ${p.done} of ${p.total} · `; st.dataset.done = String(p.done); st.dataset.total = String(p.total); tick(); }
    } catch (e) { /* the sweep's own answer reports errors */ }
  };
  tick(); clearInterval(PA.timer); PA.timer = setInterval(() => { tick(); poll(); }, 250);
  try {
    const r = await api('/api/patch', { ...body, job });
    if (seq !== PA.seq) return;
    PA.res = r; PA.req = body; PA.site = null;
    showError('patch-error', '');
    drawPatch();
    patchReadout(null);
    $('site').hidden = true;
    st.textContent = `${r.sites.length} sites, ${r.forwards} forwards of ${r.tokens_run} tokens (2 unpatched + 1 per site${r.sites_skipped ? `, ${r.sites_skipped} sites after the metric's last position need none` : ''}), ${r.seconds.toFixed(2)} s on the server`;
  } catch (e) {
    if (seq !== PA.seq) return;
    st.textContent = ''; showError('patch-error', e.message);
  } finally {
    if (seq === PA.seq) { clearInterval(PA.timer); btn.disabled = false; st.classList.remove('busy'); delete document.body.dataset.patchBusy; document.body.dataset.patchDone = String(seq); }
  }
}

// The grid as `qkv patch` prints it: a row per layer (layer.head with per_position), a column per head
// (per position), cells = normalised metric.
function patchGrid(r) {
  const heads = r.heads > 0, per = r.per_position ? r.T : heads ? r.heads : 1;
  const shown = r.base === 'clean' ? r.inputs.clean : r.inputs.corrupt, labs = r.base === 'clean' ? r.clean_tokens : r.corrupt_tokens;
  const rows = [], grid = [], sites = [];
  for (let i = 0; i < r.sites.length; i += per) {
    const s = r.sites[i];
    rows.push(r.per_position && heads ? `${s.layer}.${s.head}` : `layer ${s.layer}`);
    grid.push(r.sites.slice(i, i + per).map((x) => x.normalised));
    sites.push(r.sites.slice(i, i + per));
  }
  const kv = heads && r.heads === r.n_kv_head && r.n_kv_head < r.n_head && /hook_(k|v|rot_k)$/.test(r.hook);
  const cols = [...Array(per).keys()].map((c) => (r.per_position ? `${c} ${labs[c]}` : heads ? `${kv ? 'kv ' : ''}head ${c}` : 'all'));
  return { rows, cols, grid, sites, shown };
}

function patchSpec() {
  const r = PA.res, g = patchGrid(r);
  const cell = Math.max(10, Math.min(52, Math.floor(940 / g.cols.length)));
  const metric = r.metric;
  return { rows: g.rows.length, cols: g.cols.length, get: (i, j) => g.grid[i][j], rowLabels: g.rows, colLabels: g.cols,
    title: `${r.hook} (${r.direction}): ${metric} — 0 = corrupt, 1 = clean`, rowTitle: r.per_position && r.heads > 0 ? 'layer.head' : 'layer',
    colTitle: r.per_position ? `position (${r.base} tokens)` : r.heads > 0 ? 'head' : '', scale: 'seq', lo: 0, hi: 1, cell, showValues: true,
    fmt: (v) => (v === null ? 'nan' : v.toFixed(2)), hlCell: PA.site ? PA.site.cell : null,
    titleAt: (i, j) => `${g.rows[i]} ${g.cols[j]}: ${g.grid[i][j]}` , _g: g };
}

function drawPatch() {
  const r = PA.res;
  if (!r) return;
  const spec = patchSpec(), g = layoutHeatmap(spec), c = $('patch-canvas');
  PA.geom = drawHeatmap(new CanvasPainter(c, g.w, g.h), 0, 0, spec);
  PA.grid = spec._g;
  PA.fig = { w: g.w, h: g.h, title: spec.title, draw: (p) => drawHeatmap(p, 0, 0, { ...spec, hlCell: null }) };
  Object.assign(c.dataset, { x0: PA.geom.x0, y0: PA.geom.y0, cell: PA.geom.cw, rows: spec.rows, cols: spec.cols, values: JSON.stringify(spec._g.grid) });
  const rep = r.inputs.repeated ? `the repeated-sequence task (N = ${r.inputs.repeated}), ` : '';
  $('patch-summary').textContent = `${rep}${r.T} tokens; metric ${r.metric}: clean run ${f6(r.clean)}, corrupt run ${f6(r.corrupt)}. ` +
    (r.direction === 'noising' ? 'Noising: the clean run with one corrupt slice; a cell near 1 means that site does not matter, near 0 that corrupting it alone is as bad as corrupting the input.'
      : 'Denoising: the corrupt run with one clean slice; a cell near 1 means that site alone restores the clean answer.') +
    (r.clean === r.corrupt ? ' The clean and corrupt runs give the same metric, so nothing can be normalised (cells nan).' : '') +
    ' Click a cell for its head\'s pattern before and after.';
}

function patchReadout(ij) {
  const ro = $('patch-readout'), r = PA.res;
  if (!ij) { ro.textContent = 'hover a cell; click it for the pattern before and after'; return; }
  const s = PA.grid.sites[ij[0]][ij[1]];
  const kv = r.heads > 0 && r.n_kv_head < r.n_head && /hook_(k|v|rot_k)$/.test(r.hook);
  const labs = r.base === 'clean' ? r.clean_tokens : r.corrupt_tokens;
  const where = `layer ${s.layer}${s.head === null ? '' : (kv ? ', key/value head ' : ', head ') + s.head}${s.pos === null ? '' : `, position ${s.pos} “${labs[s.pos]}”`}`;
  ro.replaceChildren(el('span', { text: `${where}: normalised ` }), el('b', { id: 'patch-value', text: s.normalised === null ? 'nan' : f6(s.normalised) }),
    el('span', { class: 'muted', text: `   metric ${f6(s.metric)} (clean ${f6(r.clean)}, corrupt ${f6(r.corrupt)})` }));
  Object.assign(ro.dataset, { layer: String(s.layer), head: String(s.head), pos: String(s.pos), value: String(s.normalised), metric: String(s.metric) });
}

async function patchSite(ij) {
  const s = PA.grid.sites[ij[0]][ij[1]];
  PA.site = { cell: ij, s };
  drawPatch();
  const body = { ...PA.req, layer: s.layer, head: s.head, pos: s.pos };
  $('site').hidden = false;
  $('site-title').textContent = `layer ${s.layer}${s.head === null ? '' : ', head ' + s.head}${s.pos === null ? '' : ', position ' + s.pos}: computing…`;
  try {
    const r = await api('/api/patch-site', body);
    if (PA.site.s !== s) return;
    PA.site.res = r;
    showError('patch-error', '');
    drawSite();
    document.body.dataset.siteReady = `${s.layer},${s.head},${s.pos}`;
  } catch (e) { if (PA.site.s === s) showError('patch-error', e.message); }
}

function siteSpecs() {
  const r = PA.site.res, T = r.T, tok = r.tokens, cell = Math.max(3, Math.min(22, Math.floor(330 / T)));
  const base = { rows: T, cols: T, masked: (i, j) => hidden(r.layer, i, j), rowLabels: tok, colLabels: tok, scale: 'seq', lo: 0, hi: 1, cell, showValues: cell >= 34, rowTitle: 'query', colTitle: 'key' };
  const before = { ...base, get: (i, j) => r.before[i][j], title: `before: head ${r.view_head} at layer ${r.layer} (${r.base} run)`, titleAt: (i, j) => `${tok[i]} → ${tok[j]}: ${r.before[i][j]}` };
  const after = { ...base, get: (i, j) => r.after[i][j], title: `after: ${r.patched}${r.head === null ? '' : ' head ' + r.head}${r.pos === null ? '' : ' @' + r.pos} patched`, titleAt: (i, j) => `${tok[i]} → ${tok[j]}: ${r.after[i][j]}` };
  const L = r.pattern_change.length, H = r.pattern_change[0].length;
  let hi = 0;
  for (const row of r.pattern_change) for (const v of row) hi = Math.max(hi, v);
  const change = { rows: L, cols: H, get: (i, j) => r.pattern_change[i][j], rowLabels: [...Array(L).keys()].map((l) => 'L' + l), colLabels: [...Array(H).keys()].map((h) => 'H' + h),
    title: 'max |Δ pattern| per head', scale: 'seq', lo: 0, hi: hi || 1, cell: Math.max(16, Math.min(40, Math.floor(260 / H))), showValues: true, fmt: (v) => (v === 0 ? '0' : v < 0.005 ? v.toExponential(0) : v.toFixed(2)) };
  return [before, after, change];
}

function patchFigure() {
  if (!PA.fig) return null;
  if (!PA.siteFig || $('site').hidden) return PA.fig;
  const a = PA.fig, b = PA.siteFig;
  return { w: Math.max(a.w, b.w), h: a.h + 20 + b.h, title: a.title, draw: (p) => { a.draw(p); if (p.ctx) { p.ctx.save(); p.ctx.translate(0, a.h + 20); b.draw(p); p.ctx.restore(); } else { p.parts.push(`<g transform="translate(0 ${a.h + 20})">`); b.draw(p); p.parts.push('</g>'); } } };
}

function drawSite() {
  const r = PA.site.res;
  const specs = siteSpecs(), ids = ['site-before', 'site-after', 'site-change'];
  specs.forEach((sp, k) => { const g = layoutHeatmap(sp); PA['sg' + k] = drawHeatmap(new CanvasPainter($(ids[k]), g.w, g.h), 0, 0, sp); });
  const gs = specs.map(layoutHeatmap);
  PA.siteFig = { w: gs[0].w + gs[1].w + gs[2].w + 40, h: Math.max(...gs.map((g) => g.h)), title: 'patched site',
    draw: (p) => { drawHeatmap(p, 0, 0, specs[0]); drawHeatmap(p, gs[0].w + 20, 0, specs[1]); drawHeatmap(p, gs[0].w + gs[1].w + 40, 0, specs[2]); } };
  const kvNote = r.kv_site && r.query_heads_of_site.length > 1 ? ` Key/value head ${r.head} is read by query heads ${r.query_heads_of_site.join(', ')}; head ${r.view_head} is shown.` : '';
  $('site-title').textContent = `layer ${r.layer}${r.head === null ? '' : (r.kv_site && r.query_heads_of_site.length > 1 ? ', key/value head ' : ', head ') + r.head}${r.pos === null ? '' : ', position ' + r.pos}: normalised ${r.normalised === null ? 'nan' : f6(r.normalised)} (metric ${f6(r.metric)})`;
  const same = r.max_abs_change === 0;
  $('site-note').textContent = (same ? `The pattern of head ${r.view_head} at layer ${r.layer} is bit-identical after the patch (max |Δ| = 0): ` +
      (/hook_v$|hook_z$|hook_result$/.test(r.hook) ? 'this patch changes what the head moves, not where it looks — seed 000\'s split.' : 'nothing before it changed.')
    : `The pattern of head ${r.view_head} at layer ${r.layer} moves by up to ${f6(r.max_abs_change)}: the patch changes where it looks.`) +
    kvNote + ' Right: how far every head\'s pattern moved (later layers see the patched residual stream). ' + r.note.charAt(0).toUpperCase() + r.note.slice(1) + '.';
  Object.assign($('site-note').dataset, { maxAbsChange: String(r.max_abs_change), layer: String(r.layer), head: String(r.head) });
}

// ---- direct logit attribution of the clean text (qkv attribute) -------------------------------------

const DLA = { res: null, fig: null };

async function dlaRun() {
  const tokenArg = (v) => (/^\d+$/.test(v.trim()) ? Number(v.trim()) : v);
  const ids = parseIds($('patch-clean').value);
  const body = { ...(ids ? { ids } : { text: $('patch-clean').value }), answer: tokenArg($('patch-answer').value), wrong: tokenArg($('patch-wrong').value) };
  const pos = Number($('patch-pos').value);
  if (pos >= 0) body.position = pos;
  $('dla-status').textContent = 'attributing…';
  const current = latest('dla');
  try {
    const res = await api('/api/attribute', body);
    if (!current()) return;
    DLA.res = res;
    showError('dla-error', '');
    drawDla();
    $('dla-status').textContent = '';
    document.body.dataset.dlaReady = String(Date.now());
  } catch (e) { if (current()) { $('dla-status').textContent = ''; showError('dla-error', e.message); } }
}

function dlaSpec() {
  const r = DLA.res, L = r.n_layer, H = r.n_head;
  const g = [...Array(L)].map(() => Array(H).fill(null));
  for (const t of r.terms) if (t.kind === 'head') g[t.layer][t.head] = t.value;
  let m = 0;
  for (const row of g) for (const v of row) if (v !== null) m = Math.max(m, Math.abs(v));
  return { rows: L, cols: H, get: (i, j) => g[i][j], rowLabels: [...Array(L).keys()].map((l) => 'layer ' + l), colLabels: [...Array(H).keys()].map((h) => 'head ' + h),
    title: `each head's share of logit[${r.answer_label}] − logit[${r.wrong_label}]`, rowTitle: 'layer', colTitle: 'head', scale: 'div', m,
    cell: Math.max(28, Math.min(52, Math.floor(420 / H))), showValues: true, fmt: (v) => (v === null ? '—' : v.toFixed(2)), _g: g };
}

function drawDla() {
  const r = DLA.res, c = $('dla-canvas');
  if (r.per_head) {
    const spec = dlaSpec(), g = layoutHeatmap(spec);
    drawHeatmap(new CanvasPainter(c, g.w, g.h), 0, 0, spec);
    c.dataset.values = JSON.stringify(spec._g);
    DLA.fig = { w: g.w, h: g.h, title: spec.title, draw: (p) => drawHeatmap(p, 0, 0, spec) };
  } else { c.width = 0; c.height = 0; delete c.dataset.values; }
  const others = r.terms.filter((t) => t.kind !== 'head');
  const m = Math.max(...r.terms.map((t) => Math.abs(t.value)), 1e-9);
  const bar = (name, v) => { const b = el('i'); b.style.width = Math.max(1, Math.round((Math.abs(v) / m) * 160)) + 'px'; b.style.background = v >= 0 ? '#b2182b' : '#2166ac';
    return el('div', { class: 'rb' }, el('span', { class: 't', text: name }), b, el('span', { text: f6(v) })); };
  const lens = el('table', { class: 'sd-table' }, el('tr', {}, el('th', { text: 'logit lens after' }), el('th', { text: 'logit diff' }), el('th', { text: 'top token' }), el('th', { text: 'answer rank' })),
    ...r.lens.map((x) => el('tr', {}, el('td', { text: x.layer < 0 ? 'embed' : 'layer ' + x.layer }), el('td', { class: 'num', text: f6(x.logit_diff) }), el('td', { text: x.top_label }), el('td', { class: 'num', text: String(x.answer_rank) }))));
  $('dla-side').replaceChildren(el('div', { class: 'muted', text: r.per_head ? 'the other terms:' : 'one term per attention layer (post-attention norm: a head\'s share is not linear):' }),
    el('div', { class: 'row-bars' }, ...(r.per_head ? others : r.terms).map((t) => bar(t.name, t.value))), lens);
  $('dla-note').textContent = `logit[${r.answer_label}] − logit[${r.wrong_label}] at position ${r.position} (“${r.labels[r.position]}”): the model's ${f6(r.logit_diff)}; the terms sum to ${f6(r.sum_terms)}` +
    (r.sum_minus_logit_diff === null ? ' (a final soft-cap: they add up to the difference before the cap)' : ` (difference ${r.sum_minus_logit_diff.toExponential(1)})`) +
    `; the final norm's scale frozen at ${f6(r.norm_scale)}.${r.note ? ' ' + r.note : ''}`;
  Object.assign($('dla-note').dataset, { logitDiff: String(r.logit_diff), sumTerms: String(r.sum_terms) });
}

// Path patching: the same inputs, metric and direction as the sweep; one number and its share.
async function pathRun() {
  let body;
  try { body = patchRequest(); } catch (e) { showError('patch-error', e.message); return; }
  delete body.hook; delete body.per_position;
  body.path = `${$('path-sender').value.trim()}:${$('path-receiver').value.trim()}:${$('path-input').value}`;
  const out = $('path-result');
  out.textContent = 'patching the path…'; out.classList.add('busy');
  const current = latest('path');
  try {
    const r = await api('/api/path-patch', body);
    if (!current()) return;
    showError('patch-error', '');
    const [s, rc, inp] = r.path.split(':');
    out.textContent = `${r.path} (${r.direction}): head ${s}'s output swapped only into head ${rc}'s ${inp} gives normalised ${f6(r.normalised)}; ` +
      `head ${rc}'s whole ${inp} patched gives ${f6(r.receiver_only_normalised)}: the path carries ` +
      (r.fraction_of_receiver_effect === null ? '— (the receiver alone has no effect)' : `${(100 * r.fraction_of_receiver_effect).toFixed(1)}%`) +
      ` of the receiver's ${inp} effect (${r.forwards} forwards; |Δ| of the sender's contribution ${f6(r.delta_norm)}).`;
    Object.assign(out.dataset, { normalised: String(r.normalised), fraction: String(r.fraction_of_receiver_effect), receiver: String(r.receiver_only_normalised) });
    document.body.dataset.pathReady = r.path + '/' + Date.now();
    out.classList.remove('busy');
  } catch (e) {
    if (!current()) return;
    out.textContent = ''; out.classList.remove('busy');
    showError('patch-error', e.message); document.body.dataset.pathReady = 'error/' + Date.now();
  }
}

function wirePatch() {
  $('path-run').addEventListener('click', pathRun);
  $('dla-run').addEventListener('click', dlaRun);
  const dl = $('patch-hooks');
  const rot = M.info && M.info.config && M.info.config.rotary;
  dl.replaceChildren(...PATCH_HOOKS.filter((h) => rot || !/rot_/.test(h)).map((h) => el('option', { value: h })));
  for (const id of ['patch-src-text', 'patch-src-rep', 'patch-metric']) $(id).addEventListener('change', patchMode);
  for (const id of ['patch-clean', 'patch-corrupt']) $(id).addEventListener('input', patchCount);
  $('patch-run').addEventListener('click', patchRun);
  const c = $('patch-canvas');
  c.addEventListener('mousemove', (ev) => { if (PA.geom) patchReadout(cellAt(c, PA.geom, ev)); });
  c.addEventListener('click', (ev) => { const ij = PA.geom && cellAt(c, PA.geom, ev); if (ij) patchSite(ij); });
  patchMode();
}

// ---- panel 3: heads and circuits --------------------------------------------------------------------

const HC = { heads: null, circuits: null, hgeom: [], cgeom: null };

async function loadHeads() {
  $('heads-status').textContent = 'scanning heads on repeated random tokens…';
  try {
    HC.heads = await api('/api/heads');
    drawHeads();
    $('heads-status').textContent = 'computing composition scores from the weights…';
    HC.circuits = await api('/api/circuits');
    drawHeads();
    $('heads-status').textContent = `head scores on ${HC.heads.batch} sequences of ${HC.heads.seq_len} random tokens, each repeated twice (seed ${HC.heads.seed})`;
  } catch (e) { $('heads-status').textContent = ''; showError('heads-error', e.message); }
}

function headsSpecs() {
  const r = HC.heads, L = r.n_layer, H = r.n_head;
  const get = (key) => (i, j) => r.heads[i * H + j][key];
  const hl = [...Array(H).keys()].map((h) => 'H' + h), ll = [...Array(L).keys()].map((l) => 'L' + l);
  const cell = Math.max(16, Math.min(40, Math.floor(300 / H)));
  const base = { rows: L, cols: H, rowLabels: ll, colLabels: hl, scale: 'seq', lo: 0, hi: 1, cell, showValues: true };
  return [{ ...base, get: get('previous_token'), title: 'previous-token score' },
          { ...base, get: get('induction'), title: 'induction score' }];
}

function compSpec() {
  const c = HC.circuits;
  if (!c) return null;
  const kind = $('comp-kind').value, L = c.n_layer, H = c.n_head, n = L * H;
  const lab = [];
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) lab.push(`L${l}H${h}`);
  const M2 = [...Array(n)].map(() => Array(n).fill(null));
  for (const x of c.compositions) M2[x.l1 * H + x.h1][x.l2 * H + x.h2] = x[kind];
  let hi = 0;
  for (const row of M2) for (const v of row) if (v !== null) hi = Math.max(hi, v);
  const base = c.baseline[kind + '_mean'], sd = c.baseline[kind + '_std'];
  hi = Math.max(hi, base + 6 * sd);  // colours start at the random baseline: dark = no more than chance
  return { rows: n, cols: n, get: (i, j) => M2[i][j], masked: (i, j) => M2[i][j] === null, rowLabels: lab, colLabels: lab,
    title: `${kind.toUpperCase()}-composition (random baseline ${f2(base)})`, rowTitle: 'earlier head (writes)', colTitle: 'later head (reads)',
    scale: 'seq', lo: base, hi, cell: Math.max(6, Math.min(40, Math.floor(420 / n))), showValues: true, fmt: f2 };
}

function drawHeads() {
  if (!HC.heads) return;
  const specs = headsSpecs(), c = $('heads-canvas');
  const g = specs.map(layoutHeatmap), w = g[0].w + 20 + g[1].w, h = Math.max(g[0].h, g[1].h);
  const p = new CanvasPainter(c, w, h);
  HC.hgeom = [drawHeatmap(p, 0, 0, specs[0]), drawHeatmap(p, g[0].w + 20, 0, specs[1])];
  HC.hgeom[1].x0 += g[0].w + 20;
  Object.assign(c.dataset, { x0: HC.hgeom[0].x0, y0: HC.hgeom[0].y0, cell: HC.hgeom[0].cw });
  const cs = compSpec();
  if (cs) {
    const gc = layoutHeatmap(cs);
    HC.cgeom = drawHeatmap(new CanvasPainter($('comp-canvas'), gc.w, gc.h), 0, 0, cs);
  }
}

function headsFigure() {
  if (!HC.heads) return null;
  const specs = headsSpecs(), cs = compSpec();
  const g = specs.map(layoutHeatmap), gc = cs ? layoutHeatmap(cs) : { w: 0, h: 0 };
  return { w: g[0].w + 20 + g[1].w + (cs ? 30 + gc.w : 0), h: Math.max(g[0].h, gc.h), title: 'heads and circuits',
    draw: (p) => { drawHeatmap(p, 0, 0, specs[0]); drawHeatmap(p, g[0].w + 20, 0, specs[1]); if (cs) drawHeatmap(p, g[0].w + g[1].w + 50, 0, cs); } };
}

function wireHeads() {
  const c = $('heads-canvas');
  const hit = (ev) => { for (const g of HC.hgeom) { const ij = cellAt(c, g, ev); if (ij) return [ij, g]; } return null; };
  c.addEventListener('mousemove', (ev) => {
    const x = hit(ev);
    if (!x) return;
    const [[l, h]] = x, s = HC.heads.heads[l * HC.heads.n_head + h];
    $('heads-readout').textContent = `layer ${l}, head ${h}: previous-token ${f2(s.previous_token)}, induction ${f2(s.induction)}, duplicate-token ${f2(s.duplicate_token)}` +
      (HC.circuits && HC.circuits.copying ? `, OV copying ${f2(HC.circuits.heads[l * HC.heads.n_head + h].copying)}` : '') + ' — click to see its pattern';
  });
  c.addEventListener('click', (ev) => { const x = hit(ev); if (x) focusHead(x[0][0], x[0][1], true); });
  const cc = $('comp-canvas');
  cc.addEventListener('mousemove', (ev) => {
    const ij = HC.cgeom && cellAt(cc, HC.cgeom, ev);
    if (!ij) return;
    const H = HC.circuits.n_head, [a, b] = ij, kind = $('comp-kind').value;
    const x = HC.circuits.compositions.find((c) => c.l1 * H + c.h1 === a && c.l2 * H + c.h2 === b);
    $('heads-readout').textContent = x ? `L${x.l1}H${x.h1} → L${x.l2}H${x.h2}: ${kind.toUpperCase()}-composition ${f6(x[kind])} (baseline ${f2(HC.circuits.baseline[kind + '_mean'])} ± ${f2(HC.circuits.baseline[kind + '_std'])}) — click for L${x.l2}H${x.h2}'s pattern`
      : 'composition needs the earlier head in an earlier layer';
  });
  cc.addEventListener('click', (ev) => {
    const ij = HC.cgeom && cellAt(cc, HC.cgeom, ev);
    if (!ij || !HC.circuits) return;
    const H = HC.circuits.n_head;
    if (Math.floor(ij[0] / H) < Math.floor(ij[1] / H)) focusHead(Math.floor(ij[1] / H), ij[1] % H, true);
  });
  $('comp-kind').addEventListener('change', drawHeads);
  $('show-repeated').addEventListener('click', async () => {
    if (!HC.heads) return;
    const ids = HC.heads.repeated_ids;
    M.input = { ids };
    try {
      const t = await api('/api/attention', { ids, grid: false, layer: 0, head: 0 });
      $('text').value = t.tokens.join('');
    } catch (e) { /* the attention call below reports it */ }
    $('tok-count').textContent = `${ids.length} token ids (repeated random)`;
    M.input = { ids };
    await loadAttention(true);
    $('model').scrollIntoView({ behavior: 'smooth' });
  });
}

// ---- start -----------------------------------------------------------------------------------------

async function main() {
  try {
    const info = await api('/api/info');
    M.info = info;
    const c = info.config;
    $('model-info').textContent = `model ${info.path} · ${info.model_type} · ${c.n_layer} layers × ${c.n_head} heads` +
      (c.n_kv_head && c.n_kv_head < c.n_head ? ` (${c.n_kv_head} key/value heads)` : '') +
      ` (d ${c.n_embd}, head dim ${c.head_dim}) · ${c.rotary ? `rotary positions (${c.rotary_dim} of ${c.head_dim} dims, θ ${c.rope_theta})` : 'learned positions'} · context ${c.n_positions} tokens · ${info.tokenizer ? info.tokenizer + '-token tokenizer' : 'no tokenizer: send ids'}`;
    // What differs from the seeds' picture (learned positions, one K/V head per query head, every earlier
    // token visible, S = qkᵀ/√d_k) is said above the panels; a model like GPT-2 needs no note.
    const sqrtDk = Math.abs(c.attn_scale * Math.sqrt(c.head_dim) - 1) < 1e-9;
    const notes = [];
    if (c.rotary) notes.push('S is computed from the ROTATED q and k, scale·(R_i q_i)·(R_j k_j) — the pairs the softmax reads — so S and Sᵀ below are rotated scores');
    if (c.n_kv_head < c.n_head) notes.push(`grouped-query attention: query head h reads key/value head ⌊h / ${c.n_head / c.n_kv_head}⌋`);
    if (c.window && c.window.some((w) => w > 0)) notes.push(`sliding window per layer: ${c.window.join(', ')} (0 = global)`);
    if (c.attn_softcap > 0) notes.push(`scores soft-capped at ${c.attn_softcap} before the softmax; S is shown before the cap`);
    if (notes.length || !sqrtDk) {
      notes.unshift(`A ${info.model_type} model: every pattern below is the engine's own (hook_pattern)`);
      notes.push(`the score's scale is ${f6(c.attn_scale)}${sqrtDk ? ' = 1/√d_k' : ''}; “divide by √d_k” off removes it`);
      $('model-family-note').textContent = notes.join('; ') + '.';
      $('model-family-note').hidden = false;
    }
    if (!info.features || !info.features.rope) {
      $('rope-off').textContent = `This ${info.model_type} model has learned positions: the position is added to the residual stream before W_Q and W_K, so nothing rotates q or k and a fixed q/k pair scores the same at every offset. The chart needs a rotary model (Llama, Mistral, Qwen2, Gemma, GPT-NeoX, Phi-3).`;
      $('rope-off').hidden = false; $('rope-body').hidden = true;
    } else { ropeSelects(); }
  } catch (e) { $('model-info').textContent = 'cannot reach the server: ' + e.message; }

  $('sd-scale').addEventListener('change', sdCompute);
  $('try-cash').addEventListener('click', () => sdTry(() => { SD.V[2] = [0, 1]; SD.row = 1; }));
  $('try-q10').addEventListener('click', () => sdTry(() => { SD.Q[1] = [1, 0]; SD.row = 1; }));
  $('try-q0').addEventListener('click', () => sdTry(() => { SD.Q[1] = [0, 0]; SD.row = 1; }));
  $('try-reset').addEventListener('click', () => sdLoad(SD.ex));
  $('sat').addEventListener('toggle', sdSaturation);
  $('sat-dk').addEventListener('input', () => { $('sat-dk-out').textContent = 2 ** Number($('sat-dk').value); sdSaturation(); });
  try { sdLoad(await api('/api/soft-dictionary')); } catch (e) { showError('sd-error', e.message); }

  $('re-scale').addEventListener('change', reLoad);
  $('re-masked').addEventListener('change', reLoad);
  $('re-head').addEventListener('change', () => { RE.head = Number($('re-head').value); reRender(); });
  reLoad();
  wireMatrix();
  wmLoad();

  $('text').addEventListener('input', onText);
  $('run').addEventListener('click', () => { M.input = null; onText(); });
  $('scale').addEventListener('change', () => loadAttention(true));
  $('follow').addEventListener('change', () => { M.follow = Number($('follow').value); redrawPatternOnly(); drawRowBars(); });
  wireFocus();
  wireHeads();
  wireRope();
  wirePatch();
  document.querySelectorAll('[data-export]').forEach((b) => b.addEventListener('click', () => {
    const which = b.dataset.export;
    const fig = which === 'soft' ? SD.fig : which === 'running' ? RE.fig : which === 'matrix' ? WM.fig : which === 'model' ? modelFigure()
      : which === 'rope' ? RO.fig : which === 'patch' ? patchFigure() : which === 'dla' ? DLA.fig
      : which === 'generate' ? GEN.fig : headsFigure();
    exportFigure(fig, `qkv-${which}`, b.dataset.format);
  }));
  if (M.info && !M.info.tokenizer) {
    // no tokenizer beside the model: the text boxes take token ids
    const n = Math.min(24, M.info.config.n_positions), V = M.info.config.vocab_size;
    const ids = [...Array(n).keys()].map((k) => (7 + 13 * (k % 12)) % V);
    $('text').value = 'ids: ' + ids.join(', ');
    $('patch-clean').value = 'ids: ' + ids.join(', ');
    $('patch-corrupt').value = 'ids: ' + ids.map((v, k) => (k < n / 2 ? (v + 101) % V : v)).join(', ');
    $('patch-answer').value = String(ids[0]); $('patch-wrong').value = String(ids[1] || 0);
    $('model-family-note').textContent = ($('model-family-note').hidden ? '' : $('model-family-note').textContent + ' ') +
      'This model has no tokenizer beside it: the text boxes take token ids as “ids: 1, 2, 3”.';
    $('model-family-note').hidden = false;
  }
  if (M.info) onText();
  if (M.info && M.info.features && M.info.features.heads) loadHeads();
}

main();
