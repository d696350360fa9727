// A small XML well-formedness check for the SVGs tfm writes (no XML library linked for tests): one root
// element, tags nested and closed, attributes quoted and not repeated, no raw '<' in values, every '&'
// an entity, no control characters XML 1.0 forbids. Plus helpers that count what a figure holds.
#pragma once
#include <cctype>
#include <set>
#include <string>
#include <vector>

namespace tfm_test {

// "" when `doc` is well-formed XML, else what is wrong and at which byte.
inline std::string xml_problem(const std::string& doc) {
  size_t i = 0;
  const size_t n = doc.size();
  std::vector<std::string> open;
  int roots = 0;
  const auto at = [&](const std::string& what) { return what + " at byte " + std::to_string(i); };
  const auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':' || c == '-' || c == '.' ||
           (static_cast<unsigned char>(c) & 0x80);
  };
  const auto read_name = [&]() {
    const size_t start = i;
    while (i < n && name_char(doc[i])) ++i;
    return doc.substr(start, i - start);
  };
  const auto skip_space = [&]() {
    while (i < n && std::isspace(static_cast<unsigned char>(doc[i]))) ++i;
  };
  // An entity reference starting at doc[i] == '&'.
  const auto entity_ok = [&]() {
    const size_t semi = doc.find(';', i);
    if (semi == std::string::npos || semi - i > 10) return false;
    const std::string e = doc.substr(i + 1, semi - i - 1);
    static const std::set<std::string> named = {"amp", "lt", "gt", "quot", "apos"};
    bool ok = named.count(e) > 0;
    if (!ok && e.size() > 1 && e[0] == '#') {
      ok = true;
      const bool hex = e[1] == 'x';
      for (size_t k = hex ? 2 : 1; k < e.size(); ++k)
        ok = ok && (hex ? std::isxdigit(static_cast<unsigned char>(e[k]))
                        : std::isdigit(static_cast<unsigned char>(e[k])));
    }
    i = semi + 1;
    return ok;
  };
  const auto bad_control = [](char c) {
    return static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r';
  };
  if (doc.compare(0, 5, "<?xml") == 0) {
    i = doc.find("?>");
    if (i == std::string::npos) return "unterminated XML declaration";
    i += 2;
  }
  while (i < n) {
    if (doc[i] != '<') {
      if (bad_control(doc[i])) return at("control character");
      if (doc[i] == '&') {
        if (!entity_ok()) return at("bad entity");
        continue;
      }
      if (open.empty() && !std::isspace(static_cast<unsigned char>(doc[i])))
        return at("text outside the root");
      ++i;
      continue;
    }
    if (doc.compare(i, 4, "<!--") == 0) {
      const size_t end = doc.find("-->", i);
      if (end == std::string::npos) return at("unterminated comment");
      i = end + 3;
      continue;
    }
    if (doc.compare(i, 2, "</") == 0) {
      i += 2;
      const std::string name = read_name();
      skip_space();
      if (i >= n || doc[i] != '>') return at("bad closing tag");
      ++i;
      if (open.empty() || open.back() != name) return at("</" + name + "> closes nothing open");
      open.pop_back();
      continue;
    }
    ++i;
    const std::string name = read_name();
    if (name.empty()) return at("'<' not starting a tag");
    if (open.empty() && ++roots > 1) return at("a second root element");
    std::set<std::string> attributes;
    for (;;) {
      skip_space();
      if (i >= n) return at("unterminated tag <" + name);
      if (doc[i] == '>') {
        ++i;
        open.push_back(name);
        break;
      }
      if (doc.compare(i, 2, "/>") == 0) {
        i += 2;
        break;
      }
      const std::string attr = read_name();
      if (attr.empty()) return at("bad attribute in <" + name);
      if (!attributes.insert(attr).second) return at("repeated attribute " + attr);
      skip_space();
      if (i >= n || doc[i] != '=') return at("attribute " + attr + " without '='");
      ++i;
      skip_space();
      if (i >= n || (doc[i] != '"' && doc[i] != '\'')) return at("unquoted attribute " + attr);
      const char quote = doc[i++];
      while (i < n && doc[i] != quote) {
        if (doc[i] == '<' || bad_control(doc[i]))
          return at("'<' or a control character in attribute " + attr);
        if (doc[i] == '&') {
          if (!entity_ok()) return at("bad entity in attribute " + attr);
          continue;
        }
        ++i;
      }
      if (i >= n) return at("unterminated attribute " + attr);
      ++i;
    }
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  if (roots != 1) return "no root element";
  return "";
}

// How many times `needle` occurs in `text`.
inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + needle.size()))
    ++count;
  return count;
}

// The number of "x,y" points of the polyline of the series named `name` (<g class="series"
// data-name="NAME">, as svg::draw_chart writes it); -1 when there is no such series.
inline long series_points(const std::string& svg, const std::string& name) {
  const size_t g = svg.find("<g class=\"series\" data-name=\"" + name + "\">");
  if (g == std::string::npos) return -1;
  const size_t p = svg.find("points=\"", g);
  if (p == std::string::npos) return -1;
  const size_t end = svg.find('"', p + 8);
  const std::string points = svg.substr(p + 8, end - p - 8);
  return points.empty() ? 0 : static_cast<long>(count_of(points, " ")) + 1;
}

}  // namespace tfm_test
