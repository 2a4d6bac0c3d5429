// llama.cpp's greedy continuation of token ids (node-llama-cpp's prebuilt library, CPU):
//   node greedy.mjs MODEL.gguf 1,2,3 N  ->  {"tokens": [...]} on stdout
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
const [modelPath, ids, n] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: 128, batchSize: 128});
const sequence = context.getSequence();
const out = [];
for await (const t of sequence.evaluate(ids.split(",").map(Number), {temperature: 0})) {
  out.push(t);
  if (out.length >= Number(n)) break;
}
console.log(JSON.stringify({tokens: out}));
process.exit(0);
