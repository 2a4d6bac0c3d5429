// The experiments' `--json` documents and the argument defaults behind them, built once here so that
// the CLI (tools/qkv/cmd_experiments.cpp, cmd_tour.cpp) and the Python bindings (python/) return the
// same thing for the same call.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/analysis/ablate.hpp"
#include "qkv/analysis/circuits.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/projections.hpp"
#include "qkv/analysis/scores.hpp"
#include "qkv/analysis/swap.hpp"
#include "qkv/arch.hpp"
#include "qkv/config.hpp"
#include "qkv/tokenizer.hpp"

namespace qkv::report {

// The sentence project / scores / swap read when given no tokens.
extern const char* const kExperimentText;

// The tokens an experiment reads: `given` when not empty, else kExperimentText through `tok`, else
// (no tokenizer) the first min(16, n_positions) ids of a seeded random sequence.
std::vector<int> experiment_ids(const Arch& c, const Tokenizer* tok, const std::vector<int>& given);

// The repeated sequence's length for heads / ablate: `requested` (0: min(50, what fits)) checked
// against the model's positions and `bos` against its vocabulary (qkv::Error, Usage, naming
// --seq-len / --bos).
int repeated_length(const Arch& c, int requested, int bos, int min_n);

nlohmann::json project_json(const analysis::ProjectionResult& r);
// labels: one per token.
nlohmann::json scores_json(const analysis::ScoresResult& r, const std::vector<std::string>& labels);
nlohmann::json swap_json(const analysis::SwapResult& r);
nlohmann::json heads_json(const analysis::HeadScan& scan, int n, int batch, uint64_t seed, int bos);
nlohmann::json ablate_json(const analysis::AblationResult& r, uint64_t seed);
nlohmann::json circuits_json(const analysis::CircuitsResult& r);

}  // namespace qkv::report
