#include "qkv/report/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace qkv::report {
namespace {

// Display width of UTF-8 text: count code points, not bytes (labels like "÷√d_k" and "Ġthe").
size_t width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string Table::str() const {
  std::vector<size_t> w(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& r) {
    if (r.size() > w.size()) w.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); i++) w[i] = std::max(w[i], width(r[i]));
  };
  widen(header_);
  for (const auto& r : rows_) widen(r);
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t i = 0; i < r.size(); i++) {
      const std::string pad(w[i] - width(r[i]), ' ');
      if (i) out += "  ";
      out += i == 0 ? r[i] + pad : pad + r[i];
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string s = line(header_);
  for (const auto& r : rows_) s += line(r);
  return s;
}

std::string fmt(double v, int decimals) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s(buf);
  if (s.find_first_not_of("-0.") == std::string::npos && s[0] == '-') s.erase(0, 1);  // no "-0.00"
  return s;
}

std::string fmt_sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

std::string fmt_vec(const std::vector<double>& v, int decimals) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + fmt(v[i], decimals);
  return s + "]";
}

std::string fmt_short(const std::vector<double>& v) {
  std::string s = "[";
  char buf[64];
  for (size_t i = 0; i < v.size(); i++) {
    std::snprintf(buf, sizeof buf, "%.15g", v[i]);
    s += (i ? ", " : "") + std::string(buf);
  }
  return s + "]";
}

std::string fmt_matrix(const std::vector<std::vector<double>>& m, int decimals, const std::string& indent) {
  std::string s;
  for (const auto& row : m) s += indent + fmt_vec(row, decimals) + "\n";
  return s;
}

}  // namespace qkv::report
