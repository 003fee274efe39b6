// node bench_reference.js DOCS.jsonl [REPS]
// Encode speed of the reference (the JavaScript port made HF-faithful),
// single thread: prints "MBPS <median MB/s> TOKENS <ids in one pass>".
// `dsinfer bench tokenizer` runs it on the same documents as its own run.
"use strict";
const fs = require("fs");
const { load } = require("./hf_reference.js");
const [docsPath, repsArg] = process.argv.slice(2);
const reps = Math.max(1, parseInt(repsArg || "3", 10));
const docs = fs.readFileSync(docsPath, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d, "utf8"), 0);
const tok = load(true);
tok.encode("warm up", { add_special_tokens: false });
const speeds = [];
let tokens = 0;
for (let r = 0; r < reps; r++) {
  tok.model.clear_cache && tok.model.clear_cache(); // no head start from the previous pass
  let n = 0;
  const t0 = process.hrtime.bigint();
  for (const d of docs) n += tok.encode(d, { add_special_tokens: false }).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  speeds.push(bytes / 1e6 / s);
  tokens = n;
}
speeds.sort((a, b) => a - b);
console.log(`MBPS ${speeds[Math.floor(reps / 2)].toFixed(3)} TOKENS ${tokens}`);
