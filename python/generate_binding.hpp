// qkv._qkv.generate and qkv._qkv.steering_vector (python/generate.cpp): registered by module.cpp with
// one call, which passes how to reach the engine's model inside its Model object.
#pragma once
#include <pybind11/pybind11.h>

#include <functional>
#include <set>
#include <string>

#include "qkv/lm.hpp"
#include "qkv/tokenizer.hpp"

struct ModelRef {
  const qkv::Model* lm = nullptr;
  const qkv::Tokenizer* tok = nullptr;           // null without a tokenizer
  const std::set<std::string>* hooks = nullptr;  // the model's hook names
};

void bind_generate(pybind11::module_& mod, std::function<ModelRef(pybind11::handle)> model_of);
