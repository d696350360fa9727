// llama.cpp as a client of a GGUF file, through node-llama-cpp (its prebuilt CPU libraries, never a
// build): token ids in, llama.cpp's next-token probabilities and greedy continuations out, as JSON.
//
// Usage: node scripts/dev/llama_cpp.mjs MODEL.gguf --prompts '[[ids...], ...]' [--greedy N]
//            [--texts '["text", ...]'] [--kv-cache f32|f16] [--flash-attention on|off|auto]
//        node scripts/dev/llama_cpp.mjs --jobs JOBS.json
// --jobs runs many files in one process (loading llama.cpp costs ~2 s of CPU a process): JOBS.json is
// an array of {"model", "prompts", "greedy", "texts", "kv_cache", "flash_attention", "out"}, each
// job's JSON written to its "out" file instead of stdout.
// node-llama-cpp is loaded from $TFM_NODE_LLAMA_CPP, default ${XDG_CACHE_HOME:-~/.cache}/tfm/node-llama-cpp,
// where scripts/dev/check_gguf.sh installs it (outside the repository). Prints to stdout:
//   {"model", "architecture", "llama_cpp": {repo, release}, "kv_cache", "flash_attention", "context_size",
//    "prompts": [{"tokens": ids, "probabilities": [[V] per position: p(next | tokens[0..t])],
//                 "greedy": N ids after the prompt (llama.cpp's sampler at temperature 0),
//                 "greedy_text": their text}],
//    "tokenized": [{"text", "tokens": llama.cpp's tokenize(text), no BOS}]}
// Texts are decoded from the file's own vocabulary (GPT-2's byte-to-unicode form mapped back to bytes),
// not by llama.cpp's detokenize, whose clean-up for gpt2 tokenizers drops the space before ".,!?".
import fs from "node:fs";
import {createRequire} from "node:module";
import os from "node:os";
import path from "node:path";
import {pathToFileURL} from "node:url";

const home = process.env.TFM_NODE_LLAMA_CPP ||
  path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache"), "tfm", "node-llama-cpp");
let entry;
try {
  entry = createRequire(path.join(home, "package.json")).resolve("node-llama-cpp");
} catch {
  process.stderr.write(`llama_cpp.mjs: node-llama-cpp is not installed in ${home} (scripts/dev/check_gguf.sh installs it)\n`);
  process.exit(2);
}
const {getLlama, readGgufFileInfo} = await import(pathToFileURL(entry).href);

function usage(message) {
  process.stderr.write(`llama_cpp.mjs: ${message}\n` +
    "usage: node scripts/dev/llama_cpp.mjs MODEL.gguf --prompts '[[ids...], ...]' [--greedy N] " +
    "[--texts '[\"text\", ...]'] [--kv-cache f32|f16] [--flash-attention on|off|auto]\n" +
    "       node scripts/dev/llama_cpp.mjs --jobs JOBS.json\n");
  process.exit(2);
}

function parseArgs(argv) {
  const o = {model: null, prompts: [], greedy: 0, texts: [], kvCache: "f32", flashAttention: "off"};
  if (argv[0] === "--jobs") {
    if (argv.length !== 2) usage("--jobs takes one file and nothing else");
    let jobs;
    try {
      jobs = JSON.parse(fs.readFileSync(argv[1], "utf8"));
    } catch (e) {
      usage(`--jobs ${argv[1]}: ${e.message}`);
    }
    if (!Array.isArray(jobs)) usage(`--jobs ${argv[1]}: expected a JSON array of jobs`);
    return jobs.map((j, n) => {
      if (typeof j.out !== "string") usage(`--jobs ${argv[1]}: job ${n} has no "out" file`);
      return checked({model: j.model ?? null, prompts: j.prompts ?? [], greedy: j.greedy ?? 0, texts: j.texts ?? [],
                      kvCache: j.kv_cache ?? "f32", flashAttention: j.flash_attention ?? "off", out: j.out});
    });
  }
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const value = () => (i + 1 < argv.length ? argv[++i] : usage(`${a} needs a value`));
    const json = (name) => {
      try {
        return JSON.parse(value());
      } catch (e) {
        usage(`${name}: not JSON (${e.message})`);
      }
    };
    if (a === "--prompts") o.prompts = json(a);
    else if (a === "--texts") o.texts = json(a);
    else if (a === "--greedy") o.greedy = Number(value());
    else if (a === "--kv-cache") o.kvCache = value();
    else if (a === "--flash-attention") o.flashAttention = value();
    else if (a.startsWith("--")) usage(`unknown option ${a}`);
    else if (o.model === null) o.model = a;
    else usage(`one model file only, got ${o.model} and ${a}`);
  }
  return [checked(o)];
}

// A job's options, validated.
function checked(o) {
  if (o.model === null) usage("give the GGUF file");
  if (!Array.isArray(o.prompts) || !o.prompts.every((p) => Array.isArray(p) && p.length > 0 && p.every(Number.isInteger)))
    usage("--prompts: expected a JSON array of non-empty arrays of token ids");
  if (!Array.isArray(o.texts) || !o.texts.every((t) => typeof t === "string"))
    usage("--texts: expected a JSON array of strings");
  if (!Number.isInteger(o.greedy) || o.greedy < 0) usage(`--greedy: expected a count >= 0, got ${o.greedy}`);
  if (!["f32", "f16"].includes(o.kvCache)) usage(`--kv-cache: expected f32 or f16, got ${o.kvCache}`);
  if (!["on", "off", "auto"].includes(o.flashAttention))
    usage(`--flash-attention: expected on, off or auto, got ${o.flashAttention}`);
  return o;
}

// GPT-2's byte-to-unicode map inverted: code point -> byte.
function unicodeToByte() {
  const printable = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  const map = new Map();
  let n = 0;
  for (let b = 0; b < 256; ++b) map.set(printable(b) ? b : 256 + n++, b);
  return map;
}

function decoder(tokens) {
  const toByte = unicodeToByte();
  const bytesOf = tokens.map((t) => Buffer.from([...t].map((ch) => toByte.get(ch.codePointAt(0)) ?? 0x3f)));
  return (ids) => Buffer.concat(ids.map((id) => bytesOf[id])).toString("utf8");
}

const jobs = parseArgs(process.argv.slice(2));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
for (const o of jobs) {
  const result = JSON.stringify(await run(llama, o)) + "\n";
  if (o.out) fs.writeFileSync(o.out, result);
  else process.stdout.write(result);
}
await llama.dispose();

// One file: llama.cpp's probabilities, greedy continuations and tokenizations (the JSON above).
async function run(llama, o) {
  const info = await readGgufFileInfo(o.model);
  const decode = decoder(info.metadata.tokenizer.ggml.tokens);
  const contextLength = Number(info.metadata[info.metadata.general.architecture].context_length);
  const model = await llama.loadModel({modelPath: o.model});
  const kvType = o.kvCache.toUpperCase();
  const context = await model.createContext({
    contextSize: contextLength,
    sequences: 1,
    // One thread: these models are tiny, and on a busy machine ggml's two-thread barrier waited ~1 s
    // per evaluation for a descheduled thread (0.5 ms with one).
    threads: 1,
    flashAttention: o.flashAttention === "auto" ? "auto" : o.flashAttention === "on",
    experimentalKvCacheKeyType: kvType,
    experimentalKvCacheValueType: kvType,
  });
  const sequence = context.getSequence();
  const V = info.metadata.tokenizer.ggml.tokens.length;

  const prompts = [];
  for (const tokens of o.prompts) {
    if (tokens.length + o.greedy > contextLength)
      usage(`a prompt of ${tokens.length} tokens and ${o.greedy} more exceed the model's context of ${contextLength}`);
    await sequence.clearHistory();
    const out = await sequence.controlledEvaluate(tokens.map((t) => [t, {generateNext: {probabilities: true}}]));
    const probabilities = out.map((item) => {
      const p = new Array(V).fill(0);
      for (const [token, prob] of item.next.probabilities) p[token] = prob;
      return p;
    });
    const greedy = [];
    if (o.greedy > 0) {
      // The prompt is evaluated: continue from its last token's state, one token at a time.
      await sequence.clearHistory();
      let input = tokens.map((t, i) => (i + 1 < tokens.length ? t : [t, {generateNext: {token: true, options: {temperature: 0}}}]));
      while (greedy.length < o.greedy) {
        const res = await sequence.controlledEvaluate(input);
        const next = res[res.length - 1].next.token;
        greedy.push(next);
        input = [[next, {generateNext: {token: true, options: {temperature: 0}}}]];
      }
    }
    prompts.push({tokens, probabilities, greedy, greedy_text: decode(greedy)});
  }

  const tokenized = o.texts.map((text) => ({text, tokens: model.tokenize(text, false)}));

  const result = {
    model: o.model,
    architecture: info.metadata.general.architecture,
    llama_cpp: llama.llamaCppRelease,
    kv_cache: kvType,
    flash_attention: o.flashAttention,
    context_size: context.contextSize,
    prompts,
    tokenized,
  };
  await context.dispose();
  await model.dispose();
  return result;
}
