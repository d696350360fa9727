// GPT-2's tokenizer in tfm against js-tiktoken's "gpt2" encoding (scripts/dev/check_tiktoken.sh).
//   node check_tiktoken.mjs corpus ROOT OUT        writes the mixed test text (deterministic, > 1 MB)
//   node check_tiktoken.mjs compare TEXT IDS       js-tiktoken's ids of TEXT against tfm's (a JSON array)
//   node check_tiktoken.mjs fixture                the unit tests' tricky strings with js-tiktoken's ids
// js-tiktoken is found through $TFM_JS_TIKTOKEN (its install directory).
import fs from "fs";
import path from "path";
import { createRequire } from "module";

const home = process.env.TFM_JS_TIKTOKEN;
const tiktoken = () => createRequire(path.join(home, "package.json"))("js-tiktoken").getEncoding("gpt2");

// A small deterministic generator (mulberry32), so the text is the same on every machine.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Strings that probe the pre-split: contractions, "'s" after non-letters, whitespace runs before words,
// digits, scripts without spaces, emoji sequences, combining marks on their own.
const tricky = [
  "Hello world", "I'm can't won't he'll they've we're she'd it's", "O'Neil's 'quote' '' 's 'S 'LL", "x''s",
  "1'st 2's !'s ''s ,'t", "  two spaces", "trailing   ", "   ", "\n\nnew paragraph", "a\n\n\nb", "tab\tseparated\t\tx",
  "\t\n \r\n x", "12345678901234567890", "3.14159 1,000,000 0x1F", "١٢٣ ٤٥ ⅷ ²³ ½", "naïve café résumé Ångström Øre",
  "e\u0301 a\u0300\u0301 \u0301alone \u0301 \u0301\u0301", "中文分词没有空格，标点符号。", "日本語のテキスト、カタカナとひらがな。",
  "한국어 텍스트", "Ελληνικά και русский текст", "עברית ועربية", "👍 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 👩🏾‍💻 ❤️ 🇫🇷",
  "\u00a0nbsp\u00a0\u00a0x \u3000ideographic\u2003em", "a\u200bb\u200dc", "int main() { return 0; }",
  "if (x != y) {\n    std::vector<int> v{1, 2};\n}\n", "snake_case_name CamelCase kConstant __dunder__",
  "URL https://example.com/a?b=c&d=e#f", "email me@example.org", "~!@#$%^&*()_+{}|:\"<>?", "<|endoftext",
  "\u2028line\u2029para", "\u000b\u000cvt ff", "mixed 123abc abc123 a1b2", " ?!", "…—–‘’“”", "ﬁ ﬂ ℌ ℵ",
];

function corpus(root, out) {
  const r = rng(20240607);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const parts = [];
  const read = (p) => fs.readFileSync(path.join(root, p), "utf8");
  parts.push(read("tests/data/tiny_shakespeare.txt"));
  const shakespeare = read("data/tinyshakespeare.txt");
  parts.push(shakespeare.slice(200000, 500000));
  parts.push(read("data/eng-fra.txt").slice(0, 150000));  // French accents, tabs, attributions
  // C++ from src/, in a fixed order.
  const cpp = [];
  const walk = (d) => fs.readdirSync(path.join(root, d)).sort().forEach((n) => {
    const p = path.join(d, n);
    if (fs.statSync(path.join(root, p)).isDirectory()) walk(p);
    else if (/\.(cpp|h)$/.test(n)) cpp.push(read(p));
  });
  walk("src");
  let code = cpp.join("\n");
  parts.push(code.slice(0, 300000));
  // Generated multilingual text: words of several scripts, emoji (ZWJ sequences, skin tones, flags),
  // whitespace runs, digits, contractions and lone combining marks, joined at random.
  const words = [
    "中文", "分词", "没有", "空格", "模型", "训练", "数据", "。", "，", "日本語", "テキスト", "カタカナ", "ひらがな", "の", "は", "、",
    "한국어", "Ελληνικά", "русский", "עברית", "عربية", "हिन्दी", "ไทย", "naïve", "café", "déjà", "Ångström", "São",
    "Zürich", "façade", "œuvre", "ß", "İstanbul", "the", "The", "of", "and", "don't", "I'm", "we've", "they'll",
    "it's", "O'Neil's", "'s", "''s", "!'s", "42", "3.14", "1,000", "２０２４", "١٢٣", "½", "²", "Ⅻ", "👍", "👍🏻", "👍🏿",
    "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "❤️", "🇯🇵", "🇺🇸", "😀😃😄", "🤷‍♀️", "e\u0301", "\u0301", "\u0308\u0301", "a\u030a",
    "\u200b", "\u200d", "\u00a0", "\u3000", "\u2003", "…", "—", "“quoted”", "(paren)", "[bracket]", "{brace}", "#", "$5",
    "@user", "x+y=z", "a_b", "--flag", "->", "::", "<<", "&&",
  ];
  const spaces = [" ", " ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", "    ", "\n   "];
  const gen = [];
  let size = 0;
  while (size < 450000) {
    const w = r() < 0.08 ? pick(tricky) : pick(words);
    const s = pick(spaces);
    gen.push(w, s);
    size += Buffer.byteLength(w) + Buffer.byteLength(s);
  }
  parts.push(gen.join(""));
  parts.push(tricky.join("\n"));
  // js-tiktoken's \s is JavaScript's (with U+FEFF, without U+0085), tiktoken's is Unicode's White_Space:
  // neither character is kept. "<|endoftext|>" (in src/) would be refused as a special token by encode().
  const text = parts.join("\n\n").replace(/[\u0085\ufeff]/g, " ").replaceAll("<|endoftext|>", "<|endoftext>");
  fs.writeFileSync(out, text);
  console.log(`${out}: ${Buffer.byteLength(text)} bytes, ${[...text].length} characters`);
}

function compare(textPath, idsPath) {
  const text = fs.readFileSync(textPath, "utf8");
  const ours = JSON.parse(fs.readFileSync(idsPath, "utf8"));
  const t0 = Date.now();
  const theirs = tiktoken().encode(text);
  const ms = Date.now() - t0;
  let i = 0;
  while (i < Math.min(ours.length, theirs.length) && ours[i] === theirs[i]) i += 1;
  const bytes = Buffer.byteLength(text);
  if (i === ours.length && i === theirs.length) {
    console.log(`ids identical: ${theirs.length} tokens of ${bytes} bytes (js-tiktoken gpt2 took ${ms} ms)`);
    return 0;
  }
  const enc = tiktoken();
  const show = (ids) => JSON.stringify(ids.slice(Math.max(0, i - 5), i + 8).map((id) => enc.decode([id])));
  console.log(`ids differ at token ${i} (tfm ${ours.length} tokens, js-tiktoken ${theirs.length}):\n` +
              `  tfm:         ${JSON.stringify(ours.slice(Math.max(0, i - 5), i + 8))} ${show(ours)}\n` +
              `  js-tiktoken: ${JSON.stringify(theirs.slice(Math.max(0, i - 5), i + 8))} ${show(theirs)}`);
  return 1;
}

function fixture() {
  const enc = tiktoken();
  const cases = tricky.map((text) => ({ text, ids: enc.encode(text) }));
  const lines = cases.map((c) => " " + JSON.stringify(c));
  console.log(`{"source": "js-tiktoken gpt2 (scripts/dev/check_tiktoken.mjs fixture)",\n "cases": [\n${lines.join(",\n")}\n]}`);
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "corpus") corpus(args[0], args[1]);
else if (cmd === "compare") process.exit(compare(args[0], args[1]));
else if (cmd === "fixture") fixture();
else { console.error("usage: check_tiktoken.mjs corpus ROOT OUT | compare TEXT IDS | fixture"); process.exit(2); }
