// node encode_file.js FILE > IDS.json
// The reference's ids for a whole file's text (UTF-8, no special tokens
// added), as one JSON array and a newline: what `dsinfer tokenize --file F
// --json` prints.
"use strict";
const fs = require("fs");
const { load } = require("./hf_reference.js");
const text = fs.readFileSync(process.argv[2], "utf8");
process.stdout.write(JSON.stringify(load(true).encode(text, { add_special_tokens: false })) + "\n");
