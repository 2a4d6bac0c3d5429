// Self-contained HTML report pages: headings, paragraphs, tables and inline SVG figures, with a little
// inline CSS. No scripts, no external fonts, styles or links: a page opens the same offline.
#pragma once
#include <string>
#include <vector>

#include "qkv/report/svg.hpp"  // escape_xml

namespace qkv::report {

class HtmlPage {
 public:
  explicit HtmlPage(std::string title);

  // <h1>…<h6>; the page title is already shown as <h1>, so sections usually use level 2.
  void add_heading(const std::string& text, int level = 2);
  // A paragraph. With escape = false, `text` is trusted inline HTML (e.g. "<code>S</code>").
  void add_paragraph(const std::string& text, bool escape = true);
  // A table; every cell is escaped. Cells that read as numbers are right-aligned in tabular figures.
  // `row_classes` (empty, or one per row) sets a CSS class per row: "held" (green), "failed" (red),
  // "warn" (amber) are styled; "" for none.
  void add_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                 const std::vector<std::string>& row_classes = {});
  // An inline SVG figure (from heatmap_svg, grid_svg, …) with an optional caption. The root's
  // xmlns="http://www.w3.org/2000/svg" is dropped: HTML puts <svg> in that namespace by itself.
  void add_svg(const std::string& svg, const std::string& caption = "");
  // Trusted HTML, appended as is.
  void add_raw(const std::string& html);

  const std::string& title() const { return title_; }
  // Everything added so far, without the document around it (for a page that embeds another's sections).
  const std::string& body() const { return body_; }
  std::string str() const;
  // Writes str() atomically (temporary file in the same directory, then rename). On failure throws
  // qkv::Error "<path>: …" and leaves neither a partial file nor a temporary one.
  void write(const std::string& path) const;

 private:
  std::string title_;
  std::string body_;
};

// Creates `dir` if needed and writes page as dir/index.html (atomically); returns its path. qkv::Error
// (data) naming the directory when it cannot be created or is not a directory.
std::string write_page_in_dir(const HtmlPage& page, const std::string& dir);

}  // namespace qkv::report
