// The tour's claims as data (private to src/analysis). A claim is one ClaimUnit: its id, the seed it comes
// from and the sentence it tests, applies(arch) — nothing, or the reason it is n/a on this architecture —
// and measure(ctx), which reads the shared TourContext (context.hpp) and returns the numbers, the
// criterion and the verdict through a Builder. claim_table() lists the units in the tour's order; each
// claims/*.cpp defines a few related units. A new claim is one unit, one row of the table and its test.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/analysis/tour.hpp"

namespace qkv::analysis::detail {

class TourContext;

// Building one claim step by step: the measured numbers, then the verdict (or n/a with the reason).
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
    c.held = held, c.summary = std::move(summary), c.criterion = std::move(criterion),
    c.note = std::move(note);
    return c;
  }
  // Not applicable to this model: never a verdict, always the reason.
  Claim na(std::string reason, std::string criterion = "") {
    c.applies = false, c.held = false, c.summary = "n/a", c.note = std::move(reason),
    c.criterion = std::move(criterion);
    return c;
  }
};

using Applies = std::optional<std::string> (*)(const Arch&);  // nullopt: applies; else why it is n/a

struct ClaimUnit {
  const char* id;
  const char* source;  // "seed 000", "issue 15"
  const char* seed;    // the sentence tested
  Applies applies;     // nullptr: every model
  Claim (*measure)(TourContext& ctx, Builder b);
};

// The units in the tour's order.
const std::vector<ClaimUnit>& claim_table();

// The units, by file (claims/*.cpp).
std::vector<ClaimUnit>
projection_claims();                    // projections, ln_trap, rmsnorm_trap, bias_trap, multi_head_slices
std::vector<ClaimUnit> score_claims();  // scores_asymmetric, the swaps, softmax_breaks_transpose
std::vector<ClaimUnit>
position_claims();  // rope_relative, qk_circuit_position_dependent, gqa_shared_kv, kv_cache_exact
std::vector<ClaimUnit>
circuit_claims();  // previous_token_head, induction_head, k_composition, qk_ov_fail_separately
std::vector<ClaimUnit> example_claims();   // soft_dictionary_example, running_example, attn_params_4d2
std::vector<ClaimUnit> softmax_claims();   // sqrt_dk, no_scale_saturates
std::vector<ClaimUnit> gradient_claims();  // gradcheck, gradcheck_model
std::vector<ClaimUnit> patching_claims();  // qk_where_v_what, k_composition_causal, ov_fault_separate

// Numbers in summaries: 3 significant digits (scientific below 1e-3 and from 1e6), and "%.1e".
std::string num(double v, int sig = 3);
std::string sci(double v);
std::string head_name(int layer, int head);
std::string head_name(const HeadRef& h);  // "none" when not chosen

}  // namespace qkv::analysis::detail
