// Plain-text tables and number formatting for the CLI's default output.
#pragma once
#include <string>
#include <vector>

namespace qkv::report {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns padded to their widest cell: the first left-aligned, the rest right-aligned.
  std::string str() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(double v, int decimals = 2);  // fixed notation; "-inf"/"nan" spelled out
std::string fmt_sci(double v);                // 1.2e-10 style, for errors
std::string fmt_vec(const std::vector<double>& v, int decimals = 2);  // "[0.07, 0.31, 0.62]"
std::string fmt_short(const std::vector<double>& v);  // shortest exact form: "[0.5, -1]"
std::string fmt_matrix(const std::vector<std::vector<double>>& m, int decimals = 2, const std::string& indent = "  ");

}  // namespace qkv::report
