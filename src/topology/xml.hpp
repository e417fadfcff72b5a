// A small XML reader for NCCL's topology files: elements, attributes, nesting, comments and the
// declaration. No text content, entities beyond the five predefined, or namespaces: NCCL's files
// need none. Errors name the line and column. Private to src/topology.
#pragma once

#include <mgm/error.hpp>

#include <cctype>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mgm::detail {

struct xml_element {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attributes;
  std::vector<std::unique_ptr<xml_element>> children;
  std::size_t line{0};

  [[nodiscard]] const std::string* attribute(std::string_view key) const {
    for (const auto& [k, v] : attributes) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  [[nodiscard]] std::string attr_or(std::string_view key, std::string fallback = {}) const {
    const auto* v = attribute(key);
    return v != nullptr ? *v : std::move(fallback);
  }
};

class xml_reader {
 public:
  explicit xml_reader(std::string_view text) : text_{text} {}

  std::unique_ptr<xml_element> parse() {
    skip_misc();
    if (at_end()) fail("no root element");
    auto root = element();
    skip_misc();
    if (!at_end()) fail("text after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw parse_error{"NCCL topology XML, line " + std::to_string(line_) + ", column " + std::to_string(column()) + ": " + why,
                      line_, column()};
  }
  [[nodiscard]] std::size_t column() const { return pos_ - line_start_ + 1; }
  [[nodiscard]] bool at_end() const { return pos_ >= text_.size(); }
  [[nodiscard]] char peek() const { return at_end() ? '\0' : text_[pos_]; }
  void advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      line_start_ = pos_ + 1;
    }
    ++pos_;
  }
  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) advance();
  }
  bool starts(std::string_view s) const { return text_.substr(pos_, s.size()) == s; }
  void skip_until(std::string_view end) {
    while (!at_end() && !starts(end)) advance();
    if (at_end()) fail("unterminated '" + std::string{end} + "'");
    for (std::size_t i = 0; i < end.size(); ++i) advance();
  }
  void skip_misc() {
    while (true) {
      skip_space();
      if (starts("<?")) {
        skip_until("?>");
      } else if (starts("<!--")) {
        skip_until("-->");
      } else {
        return;
      }
    }
  }
  std::string name() {
    const std::size_t start = pos_;
    while (!at_end() && (std::isalnum(static_cast<unsigned char>(peek())) != 0 || peek() == '_' || peek() == '-' ||
                         peek() == ':' || peek() == '.')) {
      advance();
    }
    if (pos_ == start) fail("expected a name");
    return std::string{text_.substr(start, pos_ - start)};
  }
  std::string value() {
    const char quote = peek();
    if (quote != '"' && quote != '\'') fail("expected a quoted value");
    advance();
    std::string out;
    while (!at_end() && peek() != quote) {
      if (peek() == '<') fail("'<' inside a value");
      if (peek() == '&') {
        static constexpr std::pair<std::string_view, char> entities[]{
            {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
        bool known = false;
        for (const auto& [e, c] : entities) {
          if (starts(e)) {
            out += c;
            for (std::size_t i = 0; i < e.size(); ++i) advance();
            known = true;
            break;
          }
        }
        if (!known) fail("unknown entity");
        continue;
      }
      out += peek();
      advance();
    }
    if (at_end()) fail("unterminated value");
    advance();
    return out;
  }
  std::unique_ptr<xml_element> element() {
    if (++depth_ > 64) fail("elements nested too deeply");
    if (peek() != '<') fail("expected '<'");
    auto e = std::make_unique<xml_element>();
    e->line = line_;
    advance();
    e->name = name();
    while (true) {
      skip_space();
      if (starts("/>")) {
        advance();
        advance();
        --depth_;
        return e;
      }
      if (peek() == '>') {
        advance();
        break;
      }
      std::string key = name();
      skip_space();
      if (peek() != '=') fail("expected '=' after '" + key + "'");
      advance();
      skip_space();
      e->attributes.emplace_back(std::move(key), value());
    }
    while (true) {
      skip_misc();
      if (at_end()) fail("element <" + e->name + "> is not closed");
      if (starts("</")) {
        advance();
        advance();
        const std::string closing = name();
        if (closing != e->name) fail("</" + closing + "> closes <" + e->name + ">");
        skip_space();
        if (peek() != '>') fail("expected '>'");
        advance();
        --depth_;
        return e;
      }
      if (peek() != '<') fail("unexpected text inside <" + e->name + ">");
      e->children.push_back(element());
    }
  }

  std::string_view text_;
  std::size_t pos_{0};
  std::size_t line_{1};
  std::size_t line_start_{0};
  int depth_{0};
};

}  // namespace mgm::detail
