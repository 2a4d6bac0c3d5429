// llama.cpp's decoding speed on a GGUF file (node-llama-cpp's prebuilt CPU library), as issue 26 measures
// qkv generate: greedy, N new tokens after the prompt ids, T threads. Run it from a directory whose
// node_modules holds node-llama-cpp 3.21.1 (tests/npm_ci.sh installs tests/gguf/llama into build/llama-peer):
//   cp bench/llama_cpp_decode.mjs build/llama-peer/ && node build/llama-peer/llama_cpp_decode.mjs MODEL.gguf 1,2,...,64 32 2
// -> {"prefill_ms", "decode_ms", "tokens_per_second"} (decode: the tokens after the first, per second;
// prefill_ms: the prompt and the first new token).
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
const [modelPath, ids, n, threads] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: 256, batchSize: 128, threads: Number(threads)});
const sequence = context.getSequence();
const t0 = performance.now();
let t1 = 0, count = 0;
for await (const t of sequence.evaluate(ids.split(",").map(Number), {temperature: 0})) {
  if (++count === 1) t1 = performance.now();
  if (count >= Number(n)) break;
}
const t2 = performance.now();
console.log(JSON.stringify({prefill_ms: t1 - t0, decode_ms: t2 - t1, tokens_per_second: (count - 1) / ((t2 - t1) / 1000)}));
process.exit(0);
