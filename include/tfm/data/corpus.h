// A corpus is a sorted list of documents, read as a stream of text pieces (docs/data.md).
//
// data.path names it: a file, a directory (walked recursively, files in sorted order, hidden entries
// skipped, only the formats below; links followed, a file reached twice read once, a loop not
// followed, a link to a missing corpus file an error; tfm's run folders and sweep results left out), a
// glob(3) pattern (`data/*.txt`), or a JSON list of these
// (`["data/books", "data/web/*.jsonl.gz"]`, written as the string's text). A file is, by its name in
// any case (.TXT is .txt; a walk leaves other names out and notes them):
//   .txt, .text (or any other name given explicitly, .md among them): one document, its whole text;
//   .jsonl: one document per line, the string at data.text_field of the line's JSON object (blank
//           lines are no record);
// and `.gz` / `.zst` of either, decompressed as they are read. A file whose first bytes are another
// compression format's (xz, bzip2, lz4, zip, 7z; gzip or zstd under another name) is refused. Everything
// streams in blocks: a file is never held whole, a JSON Lines record is (one line). An empty document (an
// empty file, a record whose text is "") is no document.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tfm {

struct CorpusFile {
  std::string path;
  uint64_t size = 0;               // bytes on disk (compressed when compressed)
  int64_t mtime_ns = 0;            // modification time
  uint64_t device = 0, inode = 0;  // the file's identity: two paths of one file (links) are one file
};

// The files of a data.path, in the order they are read. IoError naming data.path and the entry when
// an entry is missing or unreadable, matches nothing or holds no corpus file, or a file is named twice.
// `notes` (when given) gets a line for each kind of file a walk left out (a.txt.xz: a format tfm does
// not read; four.json: not a corpus file's name; a file reached again through a link; a loop; a
// dangling link under another name; tfm's own output), for the run's warnings.
std::vector<CorpusFile> list_corpus(const std::string& spec, std::vector<std::string>* notes = nullptr);
// Whether data.path is one file (as before corpora: any name, read as text unless .jsonl/.gz/.zst).
bool is_single_file(const std::string& spec);
// Whether a corpus file is read through a decompressor (.gz, .zst): its size on disk is not its text's.
bool is_compressed(const std::string& path);
// What the token cache is named after: a file's or directory's name (the real one for ".", "dir/.."),
// "corpus-<hash of data.path>" for a glob or a list.
std::string corpus_name(const std::string& spec);
// The directory the corpus lives in, where its default cache goes and from which the cache keys its
// files' paths: a file's parent, a directory itself (its cache inside it, hidden from the walk, moves
// with it), a glob's directory before its first wildcard, the first entry's for a list ("" = the working
// directory).
std::string corpus_home(const std::string& spec);
// data.path with every entry's path absolute, taken from the working directory (a list stays a list,
// a glob a glob): what a run records, so that it finds its data from any directory.
std::string absolute_corpus_spec(const std::string& spec);
// data.path with every entry cut to its last name (a file's, a directory's, a glob's last part:
// /home/me/data/*.txt -> *.txt; a list stays a list): what an export publishes (exported_config), the
// data named without the directories around it.
std::string corpus_spec_names(const std::string& spec);
// Where the corpus is: each entry's absolute path (links resolved; a glob's pattern made absolute),
// one a line. Two corpora with the same name in one data.cache_dir are told apart by it.
std::string corpus_location(const std::string& spec);
// Whether any file is JSON Lines (data.text_field and data.on_bad_record matter only then).
bool has_json_lines(const std::vector<CorpusFile>& files);

struct CorpusOptions {
  std::string text_field = "text";  // data.text_field
  bool skip_bad_records = false;    // data.on_bad_record = "skip"
  size_t block_bytes = 0;           // text handed out per read (0 = 4 MiB); tests make it small
  // How the command that reads the corpus spells skip_bad_records, for the advice in a bad record's
  // error (tfm tokenizer train has a flag, not the config key).
  std::string skip_option = "data.on_bad_record = \"skip\"";
  std::string text_field_option = "data.text_field";  // what sets text_field, as errors name it
};

// Reads the documents of `files` in order. Errors are IoError naming the file and the place: an
// unreadable file, a JSON Lines line that is not JSON, lacks the field or whose field is not a string
// (FILE:LINE; skipped and counted instead with skip_bad_records), a truncated or damaged .gz/.zst.
class CorpusReader {
 public:
  CorpusReader(std::vector<CorpusFile> files, CorpusOptions options);
  ~CorpusReader();
  CorpusReader(const CorpusReader&) = delete;
  CorpusReader& operator=(const CorpusReader&) = delete;

  // Moves to the next document; false at the end of the corpus.
  bool next_document();
  // Appends up to block_bytes of the current document's text to `buf`; false (nothing appended) at
  // its end.
  bool read(std::string& buf);
  // The current document for messages: "FILE" (a text file) or "FILE:LINE" (a JSON Lines record).
  const std::string& document_name() const;
  uint64_t documents() const;   // documents begun so far
  uint64_t text_bytes() const;  // bytes of text handed out by read() so far (decompressed, as read)
  // Records skipped so far (skip_bad_records), and the first few as "FILE:LINE: why".
  uint64_t skipped() const;
  const std::vector<std::string>& first_skipped() const;
  // Why a corpus read to its end without a document has none, when records were skipped: "all 3 of its
  // records were skipped as bad (data.on_bad_record = \"skip\"), the first: FILE:LINE: why" (or "N of
  // its M ... and the others' text is empty"); "" when none was.
  std::string skipped_text() const;
  // Each file's hash (token_cache.h's hash64 of its bytes on disk in kHashBlockBytes blocks, folded),
  // in file order; complete once next_document() returned false.
  const std::vector<uint64_t>& file_hashes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tfm
