// The training record as CSV and as a picture (loss curve and in-context loss).
#pragma once
#include <string>
#include <vector>

#include "qkv/train/train.hpp"

namespace qkv::cli {

void write_train_csv(const std::string& path, const std::vector<TrainRecord>& history);
void write_train_svg(const std::string& path, const std::vector<TrainRecord>& history, int eval_n);

}  // namespace qkv::cli
