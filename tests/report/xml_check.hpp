// A small strict XML well-formedness checker for the report tests (no libxml2 needed): UTF-8 and XML
// character validity, balanced and properly nested tags, quoted unique attributes, valid entity and
// character references, no '<' in attribute values, a single root. It also returns the elements, so
// tests can look at what a browser would see (decoded text and attribute values).
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::test {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;  // decoded values
  std::string text;                          // decoded direct text content
  int parent = -1;
};

struct XmlDoc {
  std::string error;  // empty when well-formed
  std::vector<XmlElement> elements;  // document order
  bool ok() const { return error.empty(); }
  std::vector<const XmlElement*> all(const std::string& name) const {
    std::vector<const XmlElement*> v;
    for (const auto& e : elements)
      if (e.name == name) v.push_back(&e);
    return v;
  }
};

namespace xml_detail {

inline void put_utf8(std::string& o, unsigned long cp) {
  if (cp < 0x80) o += char(cp);
  else if (cp < 0x800) o += char(0xC0 | (cp >> 6)), o += char(0x80 | (cp & 0x3F));
  else if (cp < 0x10000)
    o += char(0xE0 | (cp >> 12)), o += char(0x80 | ((cp >> 6) & 0x3F)), o += char(0x80 | (cp & 0x3F));
  else
    o += char(0xF0 | (cp >> 18)), o += char(0x80 | ((cp >> 12) & 0x3F)), o += char(0x80 | ((cp >> 6) & 0x3F)),
        o += char(0x80 | (cp & 0x3F));
}

inline bool char_ok(unsigned long cp) {
  return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) ||
         (cp >= 0x10000 && cp <= 0x10FFFF);
}

// Returns "" if s is valid UTF-8 made of XML characters, else a description with the byte offset.
inline std::string check_chars(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int len = b0 < 0x80 ? 1 : (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : (b0 & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return "invalid UTF-8 at byte " + std::to_string(i);
    unsigned long cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < len; k++) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return "invalid UTF-8 at byte " + std::to_string(i);
      cp = (cp << 6) | (b & 0x3F);
    }
    static const unsigned long mins[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < mins[len] || (cp >= 0xD800 && cp <= 0xDFFF)) return "invalid UTF-8 at byte " + std::to_string(i);
    if (!char_ok(cp)) return "character U+" + std::to_string(cp) + " not allowed in XML at byte " + std::to_string(i);
    i += len;
  }
  return "";
}

}  // namespace xml_detail

// `html5_doctype`: accept a leading "<!DOCTYPE html>" (the polyglot HTML pages).
inline XmlDoc parse_xml(std::string_view s, bool html5_doctype = false) {
  using namespace xml_detail;
  XmlDoc doc;
  if (std::string e = check_chars(s); !e.empty()) return doc.error = e, doc;
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    doc.error = why + " at byte " + std::to_string(i) + ": '" + std::string(s.substr(i, 40)) + "'";
    return doc;
  };
  auto is_ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  auto skip_ws = [&] { while (i < s.size() && is_ws(s[i])) i++; };
  auto name_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' || (c & 0x80); };
  auto name_char = [&](char c) { return name_start(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.'; };
  auto read_name = [&](std::string& n) {
    if (i >= s.size() || !name_start(s[i])) return false;
    size_t b = i;
    while (i < s.size() && name_char(s[i])) i++;
    n = std::string(s.substr(b, i - b));
    return true;
  };
  // Decodes an entity/character reference at s[i] == '&'.
  auto read_ref = [&](std::string& out) {
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 12) return false;
    const std::string_view r = s.substr(i + 1, semi - i - 1);
    if (r == "amp") out += '&';
    else if (r == "lt") out += '<';
    else if (r == "gt") out += '>';
    else if (r == "quot") out += '"';
    else if (r == "apos") out += '\'';
    else if (r.size() >= 2 && r[0] == '#') {
      unsigned long cp = 0;
      const bool hex = r[1] == 'x';
      const std::string_view digits = r.substr(hex ? 2 : 1);
      if (digits.empty()) return false;
      for (char c : digits) {
        const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                      : hex && std::isxdigit(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10
                                                                            : -1;
        if (d < 0) return false;
        cp = cp * (hex ? 16 : 10) + d;
        if (cp > 0x10FFFF) return false;
      }
      if (!char_ok(cp)) return false;
      put_utf8(out, cp);
    } else {
      return false;
    }
    i = semi + 1;
    return true;
  };
  auto skip_misc = [&]() -> bool {  // whitespace, comments, processing instructions
    for (;;) {
      skip_ws();
      if (s.substr(i, 4) == "<!--") {
        const size_t e = s.find("--", i + 4);
        if (e == std::string_view::npos || s.substr(e, 3) != "-->") return false;
        i = e + 3;
      } else if (s.substr(i, 2) == "<?") {
        const size_t e = s.find("?>", i);
        if (e == std::string_view::npos) return false;
        i = e + 2;
      } else {
        return true;
      }
    }
  };
  if (!skip_misc()) return fail("bad comment");
  if (html5_doctype && s.substr(i, 15) == "<!DOCTYPE html>") i += 15;
  if (!skip_misc()) return fail("bad comment");
  if (i >= s.size() || s[i] != '<') return fail("expected the root element");

  std::vector<int> stack;
  bool root_done = false;
  while (i < s.size()) {
    if (root_done) {
      if (!skip_misc()) return fail("bad comment");
      if (i < s.size()) return fail("content after the root element");
      break;
    }
    if (s[i] == '<') {
      if (s.substr(i, 4) == "<!--") {
        if (!skip_misc()) return fail("bad comment");
        continue;
      }
      if (s.substr(i, 9) == "<![CDATA[") {
        const size_t e = s.find("]]>", i);
        if (e == std::string_view::npos || stack.empty()) return fail("bad CDATA");
        doc.elements[stack.back()].text += std::string(s.substr(i + 9, e - i - 9));
        i = e + 3;
        continue;
      }
      if (s.substr(i, 2) == "</") {
        i += 2;
        std::string n;
        if (!read_name(n)) return fail("bad end tag");
        skip_ws();
        if (i >= s.size() || s[i] != '>') return fail("bad end tag");
        if (stack.empty() || doc.elements[stack.back()].name != n)
          return fail("end tag </" + n + "> does not match <" +
                      (stack.empty() ? std::string("(none)") : doc.elements[stack.back()].name) + ">");
        i++;
        stack.pop_back();
        if (stack.empty()) root_done = true;
        continue;
      }
      i++;
      XmlElement el;
      if (!read_name(el.name)) return fail("bad start tag");
      for (;;) {
        const size_t before = i;
        skip_ws();
        if (i >= s.size()) return fail("unterminated start tag");
        if (s[i] == '>' || s.substr(i, 2) == "/>") break;
        if (i == before) return fail("attributes need whitespace between them");
        std::string an, av;
        if (!read_name(an)) return fail("bad attribute name");
        skip_ws();
        if (i >= s.size() || s[i] != '=') return fail("attribute without '='");
        i++;
        skip_ws();
        if (i >= s.size() || (s[i] != '"' && s[i] != '\'')) return fail("unquoted attribute value");
        const char q = s[i++];
        while (i < s.size() && s[i] != q) {
          if (s[i] == '<') return fail("'<' in an attribute value");
          if (s[i] == '&') {
            if (!read_ref(av)) return fail("bad reference in an attribute value");
          } else {
            av += s[i++];
          }
        }
        if (i >= s.size()) return fail("unterminated attribute value");
        i++;
        if (!el.attrs.emplace(an, av).second) return fail("duplicate attribute " + an);
      }
      el.parent = stack.empty() ? -1 : stack.back();
      if (stack.empty() && !doc.elements.empty()) return fail("second root element");
      doc.elements.push_back(el);
      if (s[i] == '/') {
        i += 2;
        if (stack.empty()) root_done = true;
      } else {
        i++;
        stack.push_back(int(doc.elements.size()) - 1);
      }
      continue;
    }
    if (stack.empty()) return fail("text outside the root element");
    if (s[i] == '&') {
      if (!read_ref(doc.elements[stack.back()].text)) return fail("bad reference in text");
      continue;
    }
    if (s.substr(i, 3) == "]]>") return fail("']]>' in text");
    if (s[i] == '>') return fail("unescaped '>' in text");  // legal XML, but we always escape it
    doc.elements[stack.back()].text += s[i++];
  }
  if (!stack.empty()) return fail("unclosed <" + doc.elements[stack.back()].name + ">");
  if (doc.elements.empty()) return fail("no root element");
  return doc;
}

}  // namespace qkv::test
