// llama.cpp's prefill time on a GGUF file (node-llama-cpp 3.21.1's prebuilt CPU library), as
// `qkv bench forward --model FILE --T N` measures qkv's: N token ids (seeded, uniform over the vocabulary)
// evaluated in one batch, the last position's logits only (llama.cpp's default), T threads, one warm-up
// then R timed runs (the sequence cleared before each), median. Run it from a directory whose node_modules
// holds node-llama-cpp 3.21.1 (tests/npm_ci.sh installs tests/gguf/llama into build/llama-peer):
//   cp bench/llama_cpp_prefill.mjs build/llama-peer/ && node build/llama-peer/llama_cpp_prefill.mjs MODEL.gguf 512 2 5
// llama.cpp's AVX2 library alone (its `haswell` CPU variant): a copy of that directory with every other
// CPU variant removed, so ggml's loader can only pick haswell:
//   cp -r build/llama-peer build/llama-peer-avx2
//   find build/llama-peer-avx2/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64 -name 'libggml-cpu-*.so' \
//     ! -name libggml-cpu-haswell.so -delete
// -> {"T", "threads", "runs_ms", "median_ms", "cpu_variants"} on stdout.
import fs from "node:fs";
import path from "node:path";
import {fileURLToPath} from "node:url";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [modelPath, T = "512", threads = "2", repeats = "5"] = process.argv.slice(2);
if (!modelPath) {
  console.error("usage: node llama_cpp_prefill.mjs MODEL.gguf [T=512] [threads=2] [repeats=5]");
  process.exit(2);
}
const n = Number(T), reps = Number(repeats);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: Math.max(n + 16, 256), batchSize: n, threads: Number(threads)});
const sequence = context.getSequence();
// the same ids on every run: a fixed linear congruential sequence over the vocabulary
const nv = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? 32000;
const ids = [];
let s = 1n;
for (let i = 0; i < n; i++) {
  s = (s * 6364136223846793005n + 1442695040888963407n) % (1n << 64n);
  ids.push(Number(s >> 33n) % nv);
}
const runs = [];
for (let r = 0; r <= reps; r++) {
  await sequence.clearHistory();
  const t0 = performance.now();
  await sequence.evaluateWithoutGeneratingNewTokens(ids);
  const ms = performance.now() - t0;
  if (r > 0) runs.push(ms);  // run 0: the warm-up
}
const sorted = [...runs].sort((a, b) => a - b);
const median = sorted.length % 2 ? sorted[(sorted.length - 1) / 2] : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2;
// which CPU variants ggml could load (the AVX2-only copy has haswell alone)
let variants = [];
try {
  const bins = path.join(path.dirname(fileURLToPath(import.meta.url)), "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64");
  variants = fs.readdirSync(bins).filter((f) => f.startsWith("libggml-cpu-")).map((f) => f.slice(12, -3));
} catch {}
console.log(JSON.stringify({T: n, threads: Number(threads), runs_ms: runs, median_ms: median, cpu_variants: variants}));
process.exit(0);
