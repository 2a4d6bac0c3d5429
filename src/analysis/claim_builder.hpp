// Building one tour claim (tour.hpp's Claim) step by step: its id, source and the seed's sentence, then
// the measured numbers, then the verdict (or n/a with the reason). Shared by the GPT-2 tour and the
// family tour; private to src/analysis.
#pragma once
#include <string>
#include <utility>

#include "qkv/analysis/tour.hpp"

namespace qkv::analysis::detail {

struct Builder {
  Claim c;
  Builder(std::string id, std::string source, std::string seed) {
    c.id = std::move(id), c.source = std::move(source), c.seed = std::move(seed);
  }
  Builder& m(const std::string& k, double v) {
    c.measured.push_back({k, v, ""});
    return *this;
  }
  Builder& t(const std::string& k, const std::string& v) {
    c.measured.push_back({k, 0, v.empty() ? "-" : v});
    return *this;
  }
  Claim done(bool held, std::string summary, std::string criterion, std::string note = "") {
    c.held = held, c.summary = std::move(summary), c.criterion = std::move(criterion), c.note = std::move(note);
    return c;
  }
  // Not applicable to this model: never a verdict, always the reason.
  Claim na(std::string reason, std::string criterion = "") {
    c.applies = false, c.held = false, c.summary = "n/a", c.note = std::move(reason), c.criterion = std::move(criterion);
    return c;
  }
};

}  // namespace qkv::analysis::detail
