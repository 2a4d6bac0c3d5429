// The tour as text and JSON (tour_report.hpp): what `qkv tour` prints, `--json`, and the Python dict.
#include <cmath>

#include "qkv/report/table.hpp"
#include "qkv/report/tour_report.hpp"

namespace qkv::report {
namespace {

namespace an = qkv::analysis;
using nlohmann::json;

// Wraps `s` to `width` columns (by code points), continuation lines indented by `indent` spaces.
std::string wrap(const std::string& s, size_t width, size_t indent) {
  std::string out, line, word;
  auto cps = [](const std::string& t) {
    size_t n = 0;
    for (unsigned char ch : t) n += (ch & 0xC0) != 0x80;
    return n;
  };
  auto flush_word = [&] {
    if (word.empty()) return;
    if (!line.empty() && cps(line) + 1 + cps(word) > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    word.clear();
  };
  for (char ch : s) {
    if (ch == ' ')
      flush_word();
    else
      word += ch;
  }
  flush_word();
  return out + line;
}

std::string verdict(const an::Claim& c) {
  return !c.applies ? "n/a" : c.held ? "holds" : "does not hold";
}

std::string hn(const an::HeadRef& h) {
  return std::to_string(h.layer) + "." + std::to_string(h.head);
}

size_t not_applicable(const an::TourResult& r) {
  return r.claims.size() - size_t(r.applicable_count());
}

// "22 of 22 applicable claims hold"
std::string count(const an::TourResult& r) {
  return std::to_string(r.held_count()) + " of " + std::to_string(r.applicable_count()) +
         " applicable claims hold";
}

json measured_json(const an::Claim& c) {
  json j = json::object();
  for (const auto& m : c.measured) {
    if (m.is_text())
      j[m.key] = m.text;
    else if (std::isfinite(m.value))
      j[m.key] = m.value;
    else
      j[m.key] = nullptr;
  }
  return j;
}

}  // namespace

std::string tour_text(const an::TourResult& r, const TourReportInfo& info, const std::string& report) {
  const Arch& a = r.arch;
  std::string o = "qkv tour of " + info.model + " (" + a.model_type + "): " + std::to_string(r.L) +
                  " layer(s), " + std::to_string(r.H) + " query heads / " + std::to_string(r.n_kv) +
                  " key-value heads of " + std::to_string(r.dh) + ", d = " + std::to_string(r.d) +
                  "\ntour text: " + std::to_string(r.T) + " tokens" +
                  (info.text.empty() ? " (random ids repeated)" : ": \"" + info.text + "\"") +
                  "\nchosen head " + hn(r.induction) + " (top induction score" +
                  (r.L >= 2 ? " in layers ≥ 1" : "") + "); previous-token head " + hn(r.previous) + "\n\n";
  int i = 0;
  for (const auto& c : r.claims) {
    ++i;
    const std::string v = !c.applies ? "n/a" : c.held ? "HOLDS" : "DOES NOT HOLD";
    const std::string head = (i < 10 ? " " : "") + std::to_string(i) + ". " + c.id + "  [" + c.source + "]";
    o += head + std::string(head.size() < 60 ? 60 - head.size() : 1, ' ') + v + "\n";
    o += "    seed:      " + wrap(c.seed, 100, 15) + "\n";
    o += "    measured:  " + wrap(c.summary, 100, 15) + "\n";
    if (!c.criterion.empty()) o += "    criterion: " + wrap(c.criterion, 100, 15) + "\n";
    if (!c.note.empty()) o += "    note:      " + wrap(c.note, 100, 15) + "\n";
  }
  Table t({"claim", "verdict"});
  for (const auto& c : r.claims) t.add({c.id, verdict(c)});
  return o + "\n" + t.str() + "\n" + count(r) + " on this " + a.model_type + " model (" +
         std::to_string(not_applicable(r)) + " n/a; " + fmt(r.seconds, 1) + " s). Report: " + report + "\n";
}

std::string compare_text(const TourSide& x, const TourSide& y, const std::string& report) {
  auto side = [](const TourSide& s) { return s.info.model + " (" + s.r.arch.model_type + ")"; };
  Table t({"claim", side(x), side(y)});
  for (const std::string& id : an::tour_claim_ids()) {
    const an::Claim *a = x.r.claim(id), *b = y.r.claim(id);
    t.add({id, a ? verdict(*a) : "-", b ? verdict(*b) : "-"});
  }
  auto line = [](const TourSide& s) {
    return s.info.model + ": " + count(s.r) + " (" + std::to_string(not_applicable(s.r)) + " n/a)";
  };
  return "qkv tour: " + x.info.model + " beside " + y.info.model + "\n\n" + t.str() + "\n" + line(x) + "; " +
         line(y) + ". Report: " + report + "\n";
}

json claims_json(const std::vector<an::Claim>& claims) {
  json j = json::array();
  for (const auto& cl : claims)
    j.push_back({{"id", cl.id},
                 {"held", cl.held},
                 {"applies", cl.applies},
                 {"measured", measured_json(cl)},
                 {"criterion", cl.criterion},
                 {"seed", cl.seed},
                 {"source", cl.source},
                 {"summary", cl.summary},
                 {"note", cl.note}});
  return j;
}

json tour_json(const an::TourResult& r, const TourReportInfo& info, const std::string& report) {
  std::vector<std::string> labels = info.labels;
  if (labels.empty())
    for (int id : r.text_ids) labels.push_back("#" + std::to_string(id));
  return {{"model", info.model},
          {"family", r.arch.model_type},
          {"architecture", r.arch.to_json()},
          {"layers", r.L},
          {"heads", r.H},
          {"kv_heads", r.n_kv},
          {"d", r.d},
          {"dh", r.dh},
          {"text", {{"tokens", r.T}, {"ids", r.text_ids}, {"labels", labels}, {"text", info.text}}},
          {"repeated", {{"seq_len", r.n}, {"batch", r.batch}, {"seed", r.seed}, {"bos", r.bos}}},
          {"chosen",
           {{"induction", {r.induction.layer, r.induction.head}},
            {"previous_token", {r.previous.layer, r.previous.head}}}},
          {"held", r.held_count()},
          {"applicable", r.applicable_count()},
          {"total", r.claims.size()},
          {"seconds", r.seconds},
          {"report", report.empty() ? json(nullptr) : json(report)},
          {"claims", claims_json(r.claims)}};
}

}  // namespace qkv::report
