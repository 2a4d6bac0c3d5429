// Fused causal attention (flash.hpp) at GPT-2 small's head shape: H = 12, dh = 64.
// GFLOP/s counts causal FLOPs only: forward 2 matmuls over the lower triangle = 4·(T²/2)·dh·H,
// forward + backward 7 matmuls = 14·(T²/2)·dh·H. Run with OMP_NUM_THREADS set to the cores to use;
// --benchmark_format=json gives the numbers bench/compare_pytorch.py reads.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>
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
  state.SetLabel(std::string("path ") + qkv::flash_path_name());
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
  state.SetLabel(std::string("path ") + qkv::flash_path_name());
}

// A forced path: the portable fallback for scale, AVX2 + FMA (the path of CPUs without AVX-512).
void forced(benchmark::State& state, qkv::FlashPath p, void (*bm)(benchmark::State&)) {
  if (!qkv::flash_path_supported(p)) {
    state.SkipWithError((std::string("the ") + qkv::flash_path_name(p) + " path cannot run on this CPU").c_str());
    return;
  }
  qkv::flash_force_path(p);
  bm(state);
  qkv::flash_force_path(qkv::FlashPath::Auto);
}
void BM_PortableForward(benchmark::State& state) {
  forced(state, qkv::FlashPath::Portable, BM_FlashForward);
}
void BM_PortableForwardBackward(benchmark::State& state) {
  forced(state, qkv::FlashPath::Portable, BM_FlashForwardBackward);
}
void BM_Avx2Forward(benchmark::State& state) {
  forced(state, qkv::FlashPath::Avx2, BM_FlashForward);
}
void BM_Avx2ForwardBackward(benchmark::State& state) {
  forced(state, qkv::FlashPath::Avx2, BM_FlashForwardBackward);
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
BENCHMARK(BM_Avx2Forward)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Avx2ForwardBackward)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
