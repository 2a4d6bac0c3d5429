// Fused causal attention (flash.hpp) at GPT-2 small's head shape: H = 12, dh = 64.
// GFLOP/s counts causal FLOPs only: forward 2 matmuls over the lower triangle = 4·(T²/2)·dh·H,
// forward + backward 7 matmuls = 14·(T²/2)·dh·H. Run with OMP_NUM_THREADS set to the cores to use;
// --benchmark_format=json gives the numbers bench/compare_pytorch.py reads.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "qkv/flash.hpp"

namespace {

constexpr int kH = 12, kDh = 64;

struct Inputs {
  int T;
  std::vector<float> q, k, v, z, lse, dz, dq, dk, dv;
  explicit Inputs(int T_) : T(T_) {
    const size_t n = static_cast<size_t>(kH) * T * kDh;
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (auto* x : {&q, &k, &v, &dz}) {
      x->resize(n);
      for (auto& e : *x) e = dist(rng);
    }
    for (auto* x : {&z, &dq, &dk, &dv}) x->assign(n, 0.0f);
    lse.assign(static_cast<size_t>(kH) * T, 0.0f);
  }
};

const float kScale = 1.0f / std::sqrt(static_cast<float>(kDh));

double causal_flops(int T, double matmuls) {
  return matmuls * 2.0 * (0.5 * T * T) * kDh * kH;
}

void BM_FlashForward(benchmark::State& state) {
  Inputs in(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    qkv::flash_attention_forward(in.q.data(), in.k.data(), in.v.data(), in.z.data(), in.lse.data(), kH, in.T,
                                 kDh, kScale);
    benchmark::DoNotOptimize(in.z.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(causal_flops(in.T, 2) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["avx512"] = qkv::flash_uses_avx512() ? 1 : 0;
}

void BM_FlashForwardBackward(benchmark::State& state) {
  Inputs in(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    qkv::flash_attention_forward(in.q.data(), in.k.data(), in.v.data(), in.z.data(), in.lse.data(), kH, in.T,
                                 kDh, kScale);
    qkv::flash_attention_backward(in.q.data(), in.k.data(), in.v.data(), in.z.data(), in.lse.data(),
                                  in.dz.data(), in.dq.data(), in.dk.data(), in.dv.data(), kH, in.T, kDh,
                                  kScale);
    benchmark::DoNotOptimize(in.dq.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(causal_flops(in.T, 7) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["avx512"] = qkv::flash_uses_avx512() ? 1 : 0;
}

// The portable fallback, for scale (the path taken on CPUs without AVX-512).
void BM_PortableForward(benchmark::State& state) {
  qkv::flash_force_portable(true);
  BM_FlashForward(state);
  qkv::flash_force_portable(false);
}
void BM_PortableForwardBackward(benchmark::State& state) {
  qkv::flash_force_portable(true);
  BM_FlashForwardBackward(state);
  qkv::flash_force_portable(false);
}

BENCHMARK(BM_FlashForward)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->Arg(8192)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_FlashForwardBackward)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_PortableForward)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PortableForwardBackward)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
