// UTF-8 (utf8.h): strict decoding, encoding and character boundaries.
#include "tfm/data/utf8.h"

#include <algorithm>
#include <cstdio>

#include "tfm/engine/error.h"

namespace tfm {

namespace {

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", b);
  return buf;
}

}  // namespace

Utf8Char decode_utf8_char(std::string_view s, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char b = p[at];
  Utf8Char c;
  if (b < 0x80) {
    c.code_point = b, c.length = 1;
    return c;
  }
  size_t len = 0;
  uint32_t cp = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2, cp = b & 0x1F;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3, cp = b & 0x0F;
    if (b == 0xE0) lo = 0xA0;  // no overlongs
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4, cp = b & 0x07;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    c.fault = Utf8Char::Fault::BadLead, c.fault_at = at;
    return c;
  }
  for (size_t k = 1; k < len; ++k) {
    if (at + k >= s.size()) {
      c.fault = Utf8Char::Fault::Truncated, c.fault_at = at, c.expected = len;
      return c;
    }
    const unsigned char next = p[at + k];
    if (next < (k == 1 ? lo : 0x80) || next > (k == 1 ? hi : 0xBF)) {
      c.fault = Utf8Char::Fault::BadContinuation, c.fault_at = at + k;
      return c;
    }
    cp = (cp << 6) | (next & 0x3F);
  }
  c.code_point = cp, c.length = len;
  return c;
}

std::vector<uint32_t> decode_utf8(const std::string& bytes, const std::string& source) {
  std::vector<uint32_t> out;
  out.reserve(bytes.size());
  decode_utf8(bytes, source, 0, out);
  return out;
}

void decode_utf8(std::string_view bytes, const std::string& source, uint64_t base,
                 std::vector<uint32_t>& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  // The byte tokenizer is the way out for a data file; a flag's text or a stdin line is read with the
  // run's tokenizer, which the user cannot change there.
  const bool from_user = source.rfind("--", 0) == 0 || source.rfind("stdin", 0) == 0;
  for (size_t i = 0; i < bytes.size();) {
    if (p[i] < 0x80) {  // ASCII, the common case
      out.push_back(p[i++]);
      continue;
    }
    const Utf8Char c = decode_utf8_char(bytes, i);
    if (c.length > 0) {
      out.push_back(c.code_point);
      i += c.length;
      continue;
    }
    std::string why;
    switch (c.fault) {
      case Utf8Char::Fault::BadLead:
        why = "byte " + hex_byte(p[i]) + " cannot start a character";
        break;
      case Utf8Char::Fault::Truncated:
        why = "the file ends inside a " + std::to_string(c.expected) + "-byte character";
        break;
      default:
        why = "byte " + hex_byte(p[c.fault_at]) + " is not a valid continuation of the character at offset " +
              std::to_string(base + i);
    }
    throw IoError(source + ": invalid UTF-8 at byte offset " + std::to_string(base + c.fault_at) + " (" +
                  why + ")" + (from_user ? "" : "; data.tokenizer = \"byte\" reads any file"));
  }
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t utf8_boundary_before(std::string_view t, size_t at) {
  size_t p = std::min(at, t.size());
  for (int k = 0; k < 3 && p > 0 && p < t.size() && is_utf8_continuation(static_cast<unsigned char>(t[p]));
       ++k)
    --p;
  return p;
}

std::string text_file_contents(std::string bytes) {
  const size_t start = starts_with_byte_order_mark(bytes) ? kUtf8ByteOrderMark.size() : 0;
  size_t kept = 0;
  for (size_t i = start; i < bytes.size(); ++i)
    if (!(bytes[i] == '\r' && i + 1 < bytes.size() && bytes[i + 1] == '\n')) bytes[kept++] = bytes[i];
  bytes.resize(kept);
  return bytes;
}

int64_t count_utf8_chars(std::string_view t) {
  int64_t n = 0;
  for (unsigned char c : t) n += !is_utf8_continuation(c);
  return n;
}

}  // namespace tfm
