// node make_pathological.js DIR — the long inputs of the e2e test:
// 100k spaces, 100k digits, a 256 KiB and a 1 MiB word with no spaces, a
// whitespace ladder, and a multi-MB mixed text (the corpus, repeated).
"use strict";
const fs = require("fs");
const path = require("path");
const dir = process.argv[2];
let seed = 42;
const rnd = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296);
const letters = (n) => { let s = ""; for (let i = 0; i < n; i++) s += String.fromCharCode(97 + Math.floor(rnd() * 26)); return s; };
const put = (name, s) => fs.writeFileSync(path.join(dir, name), s);
put("spaces.txt", " ".repeat(100000));
put("digits.txt", "1234567890".repeat(10000));
put("word256k.txt", letters(256 * 1024));
put("word1m.txt", letters(1024 * 1024));
put("ladder.txt", Array.from({ length: 2000 }, (_, i) => " ".repeat(i % 50) + "\t\n\r\n".slice(0, i % 4) + "x").join(""));
const corpus = fs.readFileSync(path.join(__dirname, "corpus.jsonl"), "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l));
let mixed = "";
while (mixed.length < 3e6) mixed += corpus.join("\n") + "\n";
put("mixed.txt", mixed);
