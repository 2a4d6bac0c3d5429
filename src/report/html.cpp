#include "qkv/report/html.hpp"

#include <filesystem>

#include <algorithm>
#include <cstdlib>

#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"

namespace qkv::report {

namespace {

// No '<', '&' or '>' here: the page stays well-formed XML as well as HTML.
constexpr const char* kCss = R"(
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', 'DejaVu Sans', Arial, sans-serif;
  max-width: 1100px; margin: 2rem auto 4rem; padding: 0 1.25rem; color: #1f2328; background: #ffffff;
  line-height: 1.5; font-size: 16px; }
h1 { font-size: 1.75rem; margin: 0 0 .8em; padding-bottom: .3em; border-bottom: 1px solid #d0d7de; }
h2 { font-size: 1.3rem; margin: 2.2em 0 .6em; }
h3 { font-size: 1.1rem; margin: 1.8em 0 .5em; }
p { margin: .6em 0; max-width: 50em; }
code, pre { font-family: ui-monospace, 'SFMono-Regular', Menlo, Consolas, 'DejaVu Sans Mono', monospace; font-size: .9em; }
code { background: #f3f4f6; padding: .1em .3em; border-radius: 4px; }
pre { background: #f6f8fa; padding: .8em 1em; border-radius: 6px; overflow-x: auto; }
table { border-collapse: collapse; margin: 1em 0 1.4em; font-size: .92rem; }
th, td { padding: .32em .85em; border-bottom: 1px solid #e1e4e8; text-align: left; vertical-align: top; }
th { background: #f3f4f6; font-weight: 600; border-bottom: 2px solid #d0d7de; }
tbody tr:nth-child(even) { background: #f8f9fa; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.held td { background: #e7f5ec; }
tr.held td:first-child { box-shadow: inset 4px 0 #1a7f37; }
tr.failed td { background: #fdecec; }
tr.failed td:first-child { box-shadow: inset 4px 0 #cf222e; }
tr.warn td { background: #fff6db; }
tr.warn td:first-child { box-shadow: inset 4px 0 #bf8700; }
.held { color: #1a7f37; } .failed { color: #cf222e; } .warn { color: #9a6700; }
tr.held, tr.failed, tr.warn { color: inherit; }
figure { margin: 1.6em 0; }
figure .svg { overflow-x: auto; }
figure svg { display: block; max-width: none; height: auto; }
figcaption { color: #57606a; font-size: .9rem; margin-top: .4em; max-width: 50em; }
footer { margin-top: 3em; color: #8c959f; font-size: .8rem; }
)";

// A number as a table cell shows it: optional sign, digits, '.', exponent, a trailing '%' or 'x'/'×'.
bool numeric(const std::string& s) {
  if (s.empty()) return false;
  if (s == "nan" || s == "inf" || s == "-inf") return true;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return false;
  const std::string rest(end);
  return rest.empty() || rest == "%" || rest == "x" || rest == "×";
}

}  // namespace

HtmlPage::HtmlPage(std::string title) : title_(std::move(title)) {}

void HtmlPage::add_heading(const std::string& text, int level) {
  const std::string l = std::to_string(std::clamp(level, 1, 6));
  body_ += "<h" + l + ">" + escape_xml(text) + "</h" + l + ">\n";
}

void HtmlPage::add_paragraph(const std::string& text, bool escape) {
  body_ += "<p>" + (escape ? escape_xml(text) : text) + "</p>\n";
}

void HtmlPage::add_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                         const std::vector<std::string>& row_classes) {
  if (!row_classes.empty() && row_classes.size() != rows.size())
    data_error("html table: " + std::to_string(row_classes.size()) + " row classes for " +
               std::to_string(rows.size()) + " rows");
  // A column is numeric (right-aligned, header too) when all its non-empty body cells are numbers.
  size_t ncol = header.size();
  for (const auto& r : rows) ncol = std::max(ncol, r.size());
  std::vector<bool> num(ncol, true), any(ncol, false);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); c++)
      if (!r[c].empty()) any[c] = true, num[c] = num[c] && numeric(r[c]);
  auto cls = [&](size_t c) { return c < ncol && num[c] && any[c] ? std::string(" class=\"num\"") : std::string(); };

  std::string t = "<table>\n";
  if (!header.empty()) {
    t += "<thead><tr>";
    for (size_t c = 0; c < header.size(); c++) t += "<th" + cls(c) + ">" + escape_xml(header[c]) + "</th>";
    t += "</tr></thead>\n";
  }
  t += "<tbody>\n";
  for (size_t i = 0; i < rows.size(); i++) {
    t += "<tr";
    if (!row_classes.empty() && !row_classes[i].empty()) t += " class=\"" + escape_xml(row_classes[i]) + "\"";
    t += ">";
    for (size_t c = 0; c < rows[i].size(); c++) t += "<td" + cls(c) + ">" + escape_xml(rows[i][c]) + "</td>";
    t += "</tr>\n";
  }
  body_ += t + "</tbody>\n</table>\n";
}

void HtmlPage::add_svg(const std::string& svg, const std::string& caption) {
  std::string s = svg;
  static const std::string ns = " xmlns=\"http://www.w3.org/2000/svg\"";
  if (const size_t p = s.find(ns); p != std::string::npos && p < s.find('>')) s.erase(p, ns.size());
  body_ += "<figure>\n<div class=\"svg\">\n" + s + "</div>\n";
  if (!caption.empty()) body_ += "<figcaption>" + escape_xml(caption) + "</figcaption>\n";
  body_ += "</figure>\n";
}

void HtmlPage::add_raw(const std::string& html) { body_ += html; }

std::string HtmlPage::str() const {
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
  o += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n";
  o += "<title>" + escape_xml(title_) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n";
  if (!title_.empty()) o += "<h1>" + escape_xml(title_) + "</h1>\n";
  o += body_;
  o += "<footer>Made by qkv. Hover over a heatmap cell for its exact value.</footer>\n</body>\n</html>\n";
  return o;
}

void HtmlPage::write(const std::string& path) const { io::write_file_atomic(path, str()); }

std::string write_page_in_dir(const HtmlPage& page, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) data_error(dir + ": cannot create the report directory (" + ec.message() + ")");
  if (!fs::is_directory(dir, ec)) data_error(dir + ": not a directory");
  const std::string path = (fs::path(dir) / "index.html").string();
  page.write(path);
  return path;
}

}  // namespace qkv::report
