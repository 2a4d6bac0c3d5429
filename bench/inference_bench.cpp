// The GPT-2-small-shaped forward (run(), lm.hpp) at T = 128 and 1024, the SGEMMs it is made of,
// the SGEMM peak (2048²), and a training step of the bundled model's shape — the Google Benchmark
// twins of `qkv bench forward | gemm | train-step` (tools/qkv/cmd_bench.cpp). GFLOP/s as counters.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "qkv/gemm.hpp"
#include <nlohmann/json.hpp>

#include "qkv/lm.hpp"
#include "qkv/lm_train.hpp"
#include "qkv/train/train_lm.hpp"

namespace {

std::vector<float> random_vector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct Gpt2Small {
  qkv::LmParams p = qkv::init_lm(qkv::default_config("gpt2", "small"), 0);
  qkv::Model m = qkv::lm_view(p);
};

void BM_Gpt2SmallForward(benchmark::State& state) {
  static const Gpt2Small g;
  const qkv::Model& m = g.m;
  const int T = int(state.range(0));
  std::vector<int> ids(static_cast<size_t>(T));
  for (int t = 0; t < T; t++) ids[size_t(t)] = (t * 7919) % m.arch.vocab_size;
  qkv::RunState st;
  for (auto _ : state) {
    benchmark::DoNotOptimize(qkv::run(m, ids, st).data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(qkv::lm_forward_flops(m.arch, T) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Gpt2SmallForward)->Arg(128)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

// C[M, N] = A[M, K] · op(B); args M, N, K, transB
void BM_Sgemm(benchmark::State& state) {
  const int M = int(state.range(0)), N = int(state.range(1)), K = int(state.range(2));
  const bool tB = state.range(3) != 0;
  const std::vector<float> A = random_vector(size_t(M) * K, 1), B = random_vector(size_t(K) * N, 2);
  std::vector<float> C(size_t(M) * N);
  for (auto _ : state) {
    qkv::gemm<float>(false, tB, M, N, K, 1.0f, A.data(), K, B.data(), tB ? K : N, 0.0f, C.data(), N);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * M * N * K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Sgemm)
    ->ArgNames({"M", "N", "K", "tB"})
    ->Args({2048, 2048, 2048, 0})
    ->Args({128, 2304, 768, 0})
    ->Args({128, 3072, 768, 0})
    ->Args({128, 768, 3072, 0})
    ->Args({128, 50257, 768, 1})
    ->Args({1024, 2304, 768, 0})
    ->Args({1024, 3072, 768, 0})
    ->Args({1024, 768, 3072, 0})
    ->Args({1024, 50257, 768, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The bundled model's shape: 2-layer attention-only, vocab 256, d 64, 4 heads; batch 32 × 128 tokens.
void BM_TrainStep(benchmark::State& state) {
  const nlohmann::json c = {{"model_type", "gpt2"}, {"vocab_size", 256}, {"n_positions", 256}, {"n_ctx", 256},
                            {"n_embd", 64},         {"n_layer", 2},      {"n_head", 4},        {"qkv_attn_only", true}};
  qkv::LmParams m = qkv::init_lm(c, 0);
  qkv::TrainSettings s;
  s.steps = 1;
  s.batch = 32;
  s.warmup = 1;
  const qkv::DataSource data = qkv::induction_data(256, 128);
  for (auto _ : state) qkv::train_lm(m, data, s, 0, nullptr);
  state.counters["GFLOPs"] = benchmark::Counter(3.0 * 32 * qkv::lm_forward_flops(m.arch(), 128) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
