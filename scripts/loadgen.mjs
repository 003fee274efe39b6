#!/usr/bin/env node
// A load generator for any OpenAI-compatible server (dsinfer serve,
// llama-server, vLLM, SGLang): C concurrent clients, each sending streaming
// /v1/completions requests back to back with distinct prompts of W words,
// asking for exactly N tokens (ignore_eos). Per concurrency level it prints
// output tokens/s, TTFT p50/p99 and inter-token latency p50/p99; each level
// runs --repeat times and the figures are the medians over the repeats.
// Needs only Node 20 (fetch); no packages.
//
//   node scripts/loadgen.mjs --url http://127.0.0.1:8000 --conc 1,4,16 \
//        [--words 100] [--tokens 64] [--rounds 4] [--repeat 3] [--api-key K]
//        [--model NAME] [--label TEXT] [--json FILE] [--ban-invalid-utf8 TOKENIZER_JSON]
//
// --ban-invalid-utf8 sends a logit_bias of -100 for every token of the
// vocabulary whose bytes are not valid UTF-8 on their own: a random-weight
// model's greedy text then stays valid UTF-8, which llama-server needs (at
// 82bb48500a9a its output parser ends such a stream with "The model produced
// output that does not match the expected Content-only format").
import { readFileSync, writeFileSync } from "node:fs";

const opt = { url: "http://127.0.0.1:8000", conc: "1,4,16", words: 100, tokens: 64, rounds: 4,
  repeat: 3, "api-key": process.env.DSINFER_API_KEY || "", model: "", label: "", json: "", seed: 1,
  "ban-invalid-utf8": "" };
for (let i = 2; i < process.argv.length; i += 2) {
  const k = process.argv[i].replace(/^--/, "");
  if (!(k in opt) || i + 1 >= process.argv.length) {
    console.error(`loadgen: unknown or incomplete option ${process.argv[i]}`);
    process.exit(2);
  }
  opt[k] = typeof opt[k] === "number" ? Number(process.argv[i + 1]) : process.argv[i + 1];
  if (typeof opt[k] === "number" && !(opt[k] > 0)) {
    console.error(`loadgen: --${k} must be a positive number`);
    process.exit(2);
  }
}
const levels = opt.conc.split(",").map(Number);
const headers = { "Content-Type": "application/json" };
if (opt["api-key"]) headers.Authorization = `Bearer ${opt["api-key"]}`;

// deterministic prompts: words drawn with a seeded xorshift, distinct per request
const WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have an they which " +
  "one you were her all she there would their we him been has when who will more no if out so said what up its " +
  "about into than them can only other new some could time these two may then do first any my now such like our " +
  "over man me even most made after also did many before must through back years where much your way well down " +
  "should because each just those people how too little state good very make world still own see men work long " +
  "get here between both life being under never day same another know while last might us great old year off " +
  "come since against go came right used take three house river garden music letter winter city morning").split(" ");
let rng = opt.seed >>> 0 || 1;
function rand() { rng ^= rng << 13; rng >>>= 0; rng ^= rng >>> 17; rng ^= rng << 5; rng >>>= 0; return rng; }
function prompt() {
  const w = [];
  for (let i = 0; i < opt.words; i++) w.push(WORDS[rand() % WORDS.length]);
  return w.join(" ");
}

// GPT-2 byte-level BPE: each character of a token stands for one byte
function invalidUtf8Tokens(path) {
  const tok = JSON.parse(readFileSync(path, "utf8"));
  const byteOf = new Map();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    byteOf.set(String.fromCodePoint(printable ? b : 256 + n++), b);
  }
  const dec = new TextDecoder("utf-8", { fatal: true });
  const bad = {};
  for (const [s, id] of Object.entries(tok.model.vocab)) {
    const bytes = Uint8Array.from([...s].map((c) => byteOf.get(c) ?? 0));
    try { dec.decode(bytes); } catch { bad[id] = -100; }
  }
  return bad;
}
const ban = opt["ban-invalid-utf8"] ? invalidUtf8Tokens(opt["ban-invalid-utf8"]) : null;

async function modelName() {
  if (opt.model) return opt.model;
  const r = await fetch(`${opt.url}/v1/models`, { headers });
  const j = await r.json();
  return j.data[0].id;
}

// one streaming request: returns {ttft, gaps[], tokens} in seconds
async function one(model) {
  const t0 = performance.now();
  const res = await fetch(`${opt.url}/v1/completions`, {
    method: "POST", headers,
    body: JSON.stringify({ model, prompt: prompt(), max_tokens: opt.tokens, stream: true, temperature: 0,
      ignore_eos: true, stream_options: { include_usage: true }, ...(ban ? { logit_bias: ban } : {}) }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const dec = new TextDecoder();
  let buf = "", last = 0, ttft = 0, chunks = 0, usage = 0, done = false;
  const gaps = [];
  for await (const part of res.body) {
    const now = performance.now();
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, k).trim();
      buf = buf.slice(k + 2);
      if (!ev.startsWith("data:")) continue;
      const data = ev.slice(5).trim();
      if (data === "[DONE]") { done = true; continue; }
      const j = JSON.parse(data);
      if (j.error) throw new Error(`error event: ${JSON.stringify(j.error)}`);
      if (j.usage && j.usage.completion_tokens) usage = j.usage.completion_tokens;
      if (!j.choices || !j.choices.length) continue;
      const c = j.choices[0];
      if (typeof c.text !== "string" || (c.text === "" && c.finish_reason)) continue;
      chunks++;
      if (!ttft) ttft = (now - t0) / 1e3;
      else gaps.push((now - last) / 1e3);
      last = now;
    }
  }
  if (!done) throw new Error(`the stream ended without [DONE] after ${chunks} tokens: ${JSON.stringify(buf.slice(-300))}`);
  return { ttft, gaps, tokens: usage || chunks, total: (performance.now() - t0) / 1e3 };
}

const pct = (a, p) => {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const median = (a) => pct(a, 0.5);

async function level(model, c) {
  const n = c * opt.rounds;
  let next = 0, errors = 0, retries = 0;
  const reqs = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c }, async () => {
    while (next < n) {
      next++;
      for (let attempt = 0; ; attempt++) {
        try { reqs.push(await one(model)); break; } catch (e) {
          // a keep-alive connection the server closed as it was reused: the request never reached
          // it, so it is sent again (counted); anything else is an error
          if (e.message === "fetch failed" && attempt < 2) { retries++; continue; }
          errors++;
          console.error(`loadgen: ${e.message}${e.cause ? ` (${e.cause.code || e.cause.message})` : ""}`);
          break;
        }
      }
    }
  }));
  const wall = (performance.now() - t0) / 1e3;
  const tokens = reqs.reduce((s, r) => s + r.tokens, 0);
  return {
    tok_s: tokens / wall, ttft: reqs.map((r) => r.ttft), itl: reqs.flatMap((r) => r.gaps),
    requests: reqs.length, errors, retries, short: reqs.filter((r) => r.tokens !== opt.tokens).length,
  };
}

const model = await modelName();
await one(model); // warm-up: first-touch of the weights, caches, threads
const out = [];
const f = (x) => (x * 1e3).toFixed(0).padStart(6);
console.log(`${opt.label || opt.url}: ${opt.words}-word prompts, ${opt.tokens} tokens, streaming, medians of ${opt.repeat}`);
console.log("  conc   tok/s   TTFT p50  p99 ms   ITL p50  p99 ms   requests");
for (const c of levels) {
  const runs = [];
  for (let r = 0; r < opt.repeat; r++) runs.push(await level(model, c));
  const row = {
    concurrency: c, tok_s: median(runs.map((r) => r.tok_s)), tok_s_runs: runs.map((r) => r.tok_s),
    ttft_p50: median(runs.map((r) => pct(r.ttft, 0.5))), ttft_p99: median(runs.map((r) => pct(r.ttft, 0.99))),
    itl_p50: median(runs.map((r) => pct(r.itl, 0.5))), itl_p99: median(runs.map((r) => pct(r.itl, 0.99))),
    requests: runs.reduce((s, r) => s + r.requests, 0), errors: runs.reduce((s, r) => s + r.errors, 0),
    retries: runs.reduce((s, r) => s + r.retries, 0),
    short: runs.reduce((s, r) => s + r.short, 0),
  };
  out.push(row);
  console.log(`  ${String(c).padStart(4)} ${row.tok_s.toFixed(1).padStart(7)}   ${f(row.ttft_p50)} ${f(row.ttft_p99)}   ` +
    `${f(row.itl_p50)} ${f(row.itl_p99)}   ${row.requests}${row.errors ? ` (${row.errors} errors)` : ""}` +
    `${row.short ? ` (${row.short} short)` : ""}${row.retries ? ` (${row.retries} resent)` : ""}`);
}
if (opt.json) writeFileSync(opt.json, JSON.stringify({ label: opt.label, url: opt.url, words: opt.words,
  tokens: opt.tokens, repeat: opt.repeat, levels: out }, null, 1));
process.exit(out.some((r) => r.errors) ? 1 : 0);
