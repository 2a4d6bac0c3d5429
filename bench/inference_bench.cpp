// The GPT-2-small-shaped forward_fast (inference.hpp) at T = 128 and 1024, the SGEMMs it is made of,
// the SGEMM peak (2048²), and a training step of the bundled model's shape — the Google Benchmark
// twins of `qkv bench forward | gemm | train-step` (tools/qkv/cmd_bench.cpp). GFLOP/s as counters.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "qkv/gemm.hpp"
#include "qkv/inference.hpp"
#include "qkv/model.hpp"
#include "qkv/train/train.hpp"

namespace {

std::vector<float> random_vector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

const qkv::GPT2& gpt2_small() {
  static const qkv::GPT2 m = [] {
    qkv::GPT2 g{qkv::GPT2Config{}};
    qkv::init_gpt2(g, 0);
    return g;
  }();
  return m;
}

void BM_Gpt2SmallForward(benchmark::State& state) {
  const qkv::GPT2& m = gpt2_small();
  const int T = int(state.range(0));
  std::vector<int> ids(static_cast<size_t>(T));
  for (int t = 0; t < T; t++) ids[size_t(t)] = (t * 7919) % m.config.vocab_size;
  qkv::InferenceState st(m.config, T);
  for (auto _ : state) {
    benchmark::DoNotOptimize(qkv::forward_fast(m, ids, st).data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(qkv::forward_flops(m.config, T) * 1e-9,
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
  qkv::GPT2Config c;
  c.vocab_size = 256, c.n_positions = 256, c.n_embd = 64, c.n_layer = 2, c.n_head = 4, c.attn_only = true;
  qkv::GPT2 m(c);
  qkv::init_gpt2(m, 0);
  qkv::TrainSettings s;
  s.steps = 1;
  s.batch = 32;
  s.warmup = 1;
  const qkv::DataSource data = qkv::induction_data(c.vocab_size, 128);
  for (auto _ : state) qkv::train(m, data, s, 0, nullptr);
  state.counters["GFLOPs"] = benchmark::Counter(3.0 * 32 * qkv::forward_flops(c, 128) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
