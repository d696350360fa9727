// UTF-8, the one home of its rules for the data layer: strict decoding (no overlongs, surrogates or
// values above U+10FFFF), encoding, and where a byte string may be cut without splitting a character.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tfm {

// A byte of the form 10xxxxxx, which continues a character and never starts one.
inline bool is_utf8_continuation(unsigned char byte) {
  return (byte & 0xC0) == 0x80;
}

// The character that starts at s[at], decoded strictly. `length` is 0 when the bytes there are not
// one; then `fault` says why and `fault_at` is the offset of the byte at fault.
struct Utf8Char {
  enum class Fault { None, BadLead, Truncated, BadContinuation };
  uint32_t code_point = 0;
  size_t length = 0;  // bytes, 1-4; 0 when invalid
  Fault fault = Fault::None;
  size_t fault_at = 0;  // BadLead, Truncated: `at`; BadContinuation: that byte's offset
  size_t expected = 0;  // Truncated: the length the lead byte announced
};
Utf8Char decode_utf8_char(std::string_view s, size_t at);

// Decodes UTF-8 strictly; on invalid input throws IoError "SOURCE: invalid UTF-8 at byte offset N (...)".
std::vector<uint32_t> decode_utf8(const std::string& bytes, const std::string& source);
// The same for a piece of a longer file that starts `base` bytes into it (the offsets in errors count
// from the file's start); appends to `out`.
void decode_utf8(std::string_view bytes, const std::string& source, uint64_t base,
                 std::vector<uint32_t>& out);
// Appends the UTF-8 encoding of one code point.
void append_utf8(std::string& out, uint32_t code_point);

// The last character boundary at or before `at` (at most 3 bytes back): a cut there never splits a
// character. An invalid byte is a character of its own, so the decoder reports it wherever it lies.
size_t utf8_boundary_before(std::string_view text, size_t at);
// The number of characters of valid UTF-8 text (bytes that start one).
int64_t count_utf8_chars(std::string_view text);

// U+FEFF encoded, which some editors (Windows Notepad) write at the start of a UTF-8 file: it marks the
// encoding and is no character of the text, so a file's reader drops it.
constexpr std::string_view kUtf8ByteOrderMark = "\xEF\xBB\xBF";
inline bool starts_with_byte_order_mark(std::string_view text) {
  return text.substr(0, kUtf8ByteOrderMark.size()) == kUtf8ByteOrderMark;
}
// A whole text file's bytes as a corpus file is read (corpus.h): a byte order mark at its start dropped
// and each CRLF read as LF, as Python's text mode reads UTF-8. For the files given beside a corpus (a
// prompt), so that a file saved on Windows means what the same text saved on Linux does.
std::string text_file_contents(std::string bytes);

}  // namespace tfm
