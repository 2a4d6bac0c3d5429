// qkv._qkv.generate and qkv._qkv.steering_vector (python/generate.cpp): registered by module.cpp with
// one call, which passes how to reach the engine's model inside its Model object.
#pragma once
#include <pybind11/pybind11.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "qkv/lm.hpp"
#include "qkv/tokenizer.hpp"

struct ModelRef {
  const qkv::Model* lm = nullptr;
  const qkv::Tokenizer* tok = nullptr;           // null without a tokenizer
  const std::set<std::string>* hooks = nullptr;  // the model's hook names
};

void bind_generate(pybind11::module_& mod, std::function<ModelRef(pybind11::handle)> model_of);

// Calls each of `fns` as fn(act, name) on the activation `act` (float32, `numel` values at `buf`, shaped
// `shape`): a hook that returns another array replaces the activation in place — the same shape, else
// qkv.Error naming the hook (run_with_hooks and generate's fwd_hooks).
void call_python_hooks(const std::vector<pybind11::object>& fns, const pybind11::object& act, float* buf,
                       const std::string& name, const std::vector<int64_t>& shape);
