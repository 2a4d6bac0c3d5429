// An independent GGUF parser (@huggingface/gguf, pinned in package-lock.json) reads every file given and
// must report what `qkv gguf-info FILE --json` reports: version, counts, every key with its value type,
// array element type and value, every tensor's name, dims, type and offset, and the data offset.
// Usage: node check.mjs QKV_BINARY FILE.gguf...   Exit 0 when all agree; prints one line per file.
import { execFileSync } from "node:child_process";
import { resolve } from "node:path";
import { gguf } from "@huggingface/gguf";

const [qkv, ...files] = process.argv.slice(2);
if (!qkv || files.length === 0) {
  console.error("usage: node check.mjs QKV_BINARY FILE.gguf...");
  process.exit(2);
}

// Values as comparable JSON: BigInt -> decimal string (qkv prints 64-bit integers as strings).
const norm = (v) => (typeof v === "bigint" ? v.toString() : Array.isArray(v) ? v.map(norm) : v);
// @huggingface/gguf decodes strings with TextDecoder, which drops a leading U+FEFF (byte order mark):
// Llama 2's vocabulary has the token "\uFEFF" (id 31759), which it reads as "". The only known difference;
// counted and reported, never hidden: qkv's side is compared with the BOM dropped as the peer drops it.
let bomDropped = 0;
const peerView = (v) => {
  if (typeof v === "string" && v.startsWith("\uFEFF")) {
    bomDropped++;
    return v.slice(1);
  }
  return Array.isArray(v) ? v.map(peerView) : v;
};
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

let failed = 0;
for (const file of files) {
  const path = resolve(file);
  let ours, peer;
  try {
    ours = JSON.parse(execFileSync(qkv, ["gguf-info", path, "--json"], { maxBuffer: 1 << 30, stdio: ["ignore", "pipe", "pipe"] }).toString());
  } catch (e) {
    failed++;
    console.log(`FAIL ${file}: qkv gguf-info failed: ${String(e.stderr || e.message).trim()}`);
    continue;
  }
  try {
    peer = await gguf(path, { allowLocalFile: true, typedMetadata: true });
  } catch (e) {
    failed++;
    console.log(`FAIL ${file}: @huggingface/gguf failed: ${e.message}`);
    continue;
  }
  const md = peer.typedMetadata;
  const diffs = [];
  const expect = (what, a, b) => {
    if (!same(a, b)) diffs.push(`${what}: qkv ${JSON.stringify(a).slice(0, 200)} vs @huggingface/gguf ${JSON.stringify(b).slice(0, 200)}`);
  };
  expect("version", ours.version, norm(md.version.value));
  expect("tensor_count", String(ours.tensors.length), norm(md.tensor_count.value));
  expect("kv_count", String(ours.metadata.length), norm(md.kv_count.value));
  const peerKeys = Object.keys(md).filter((k) => !["version", "tensor_count", "kv_count"].includes(k));
  expect("keys", ours.metadata.map((e) => e.key).sort(), peerKeys.sort());
  for (const e of ours.metadata) {
    const p = md[e.key];
    if (!p) continue;
    expect(`${e.key} type`, e.type, p.type);
    if (e.element_type !== undefined) expect(`${e.key} element type`, e.element_type, p.subType);
    expect(`${e.key} value`, e.type === 8 || e.element_type === 8 ? peerView(e.value) : e.value, norm(p.value));
  }
  expect("tensor names", ours.tensors.map((t) => t.name), peer.tensorInfos.map((t) => t.name));
  peer.tensorInfos.forEach((t, i) => {
    const o = ours.tensors[i];
    if (!o) return;
    expect(`${t.name} n_dims`, o.ne.length, t.n_dims);
    expect(`${t.name} ne`, o.ne.map(String), norm(t.shape));
    expect(`${t.name} type`, o.type, t.dtype);
    expect(`${t.name} offset`, String(o.offset), norm(t.offset));
  });
  expect("data offset", String(ours.data_offset), norm(peer.tensorDataOffset));
  if (diffs.length) {
    failed++;
    console.log(`FAIL ${file}: ${diffs.length} differences`);
    for (const d of diffs.slice(0, 10)) console.log("     " + d);
  } else {
    console.log(`ok   ${file}: ${ours.metadata.length} keys, ${ours.tensors.length} tensors agree (GGUF v${ours.version})`);
  }
}
if (bomDropped) console.log(`note: ${bomDropped} string value(s) begin with U+FEFF, which @huggingface/gguf's TextDecoder drops`);
process.exit(failed ? 1 : 0);
