// What `qkv sweep` writes and prints from a finished sweep, built once here so that the CLI
// (tools/qkv/cmd_sweep.cpp) and Python (qkv.sweep) write the same files and return the same document.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/analysis/sweep.hpp"

namespace qkv::report {

// `qkv sweep --json` (and out/stats.json): the plan's sizes and every head's statistics.
nlohmann::json sweep_stats_json(const analysis::sweep::RunResult& r);
// out/stats.csv: one row per head, the offsets as columns offset_0 … offset_K.
std::string sweep_stats_csv(const analysis::sweep::RunResult& r);
// stats.json, stats.csv and the seven heatmaps (L layers × H heads) into the directory `out`, atomically.
void write_sweep_outputs(const std::string& out, const analysis::sweep::RunResult& r, int L, int H);

}  // namespace qkv::report
