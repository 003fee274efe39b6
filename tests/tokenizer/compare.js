// node compare.js CORPUS.jsonl EXPECTED.jsonl OURS.jsonl [DECODED.jsonl ...]
// Line by line: OURS must equal EXPECTED (ids), each DECODED must equal
// CORPUS (text: decode(encode(s)) == s). Prints the first differences and
// "N passed, M failed"; exits 1 on any failure.
"use strict";
const fs = require("fs");
const read = (p) => fs.readFileSync(p, "utf8").split("\n").filter((l, i, a) => l.length || i < a.length - 1);
const [corpusPath, expPath, oursPath, ...decPaths] = process.argv.slice(2);
const corpus = read(corpusPath).map((l) => JSON.parse(l));
const exp = read(expPath), ours = read(oursPath);
let passed = 0, failed = 0, shown = 0;
const show = (msg) => { if (shown++ < 8) console.log(msg); };
for (let i = 0; i < corpus.length; i++) {
  const a = exp[i], b = ours[i];
  if (a === undefined || b === undefined || JSON.stringify(JSON.parse(a)) !== JSON.stringify(JSON.parse(b))) {
    failed++;
    const ea = a ? JSON.parse(a) : [], eb = b ? JSON.parse(b) : [];
    let k = 0;
    while (k < ea.length && ea[k] === eb[k]) k++;
    show(`ids differ, line ${i + 1}: ${JSON.stringify(corpus[i]).slice(0, 300)}\n  expected ${JSON.stringify(ea.slice(k, k + 12))} at ${k}\n  got      ${JSON.stringify(eb.slice(k, k + 12))}`);
  } else passed++;
}
for (const p of decPaths) {
  const dec = read(p);
  for (let i = 0; i < corpus.length; i++) {
    if (dec[i] === undefined || JSON.parse(dec[i]) !== corpus[i]) {
      failed++;
      show(`round trip differs (${p}), line ${i + 1}:\n  text    ${JSON.stringify(corpus[i]).slice(0, 200)}\n  decoded ${dec[i] === undefined ? "(missing)" : dec[i].slice(0, 200)}`);
    } else passed++;
  }
}
if (ours.length !== corpus.length) { failed++; console.log(`ours has ${ours.length} lines, the corpus ${corpus.length}`); }
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
