// node reference.js CORPUS.jsonl EXPECTED.jsonl [DIFFS.txt]
// Encodes each JSON string of CORPUS (no special tokens added) with the
// reference encoder made HF-faithful (hf_reference.js) and writes one JSON
// array of ids per line. DIFFS lists the lines where the plain JavaScript
// port encodes otherwise, with the reason.
"use strict";
const fs = require("fs");
const { load } = require("./hf_reference.js");

const [corpusPath, outPath, diffPath] = process.argv.slice(2);
if (!corpusPath || !outPath) {
  console.error("usage: node reference.js CORPUS.jsonl EXPECTED.jsonl [DIFFS.txt]");
  process.exit(2);
}
const hf = load(true), js = load(false);
// JSON with the invisible characters spelled out
const show = (s) => JSON.stringify(s).replace(/[\u0080-\u009f\u00ad\u180e\u200b-\u200f\u2028\u2029\ufeff]/g,
  (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
const lines = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length);
const out = [], diffs = [];
for (let i = 0; i < lines.length; i++) {
  const s = JSON.parse(lines[i]);
  const a = hf.encode(s, { add_special_tokens: false });
  out.push(JSON.stringify(a));
  if (diffPath) {
    const b = js.encode(s, { add_special_tokens: false });
    if (JSON.stringify(a) !== JSON.stringify(b)) {
      const why = /[\u0085\ufeff]/.test(s) ? "\\s: U+0085 / U+FEFF (HF: White_Space)" : "?";
      diffs.push(`line ${i + 1}: ${why}\n  text ${show(s)}\n  HF   ${JSON.stringify(a)}\n  JS   ${JSON.stringify(b)}`);
    }
  }
}
fs.writeFileSync(outPath, out.join("\n") + "\n");
if (diffPath) fs.writeFileSync(diffPath, diffs.join("\n") + (diffs.length ? "\n" : ""));
console.log(`reference: ${lines.length} strings encoded; ${diffs.length} where the JavaScript port differs from HF`);
