// The official OpenAI client (and Anthropic's, for /v1/messages) against a
// running `dsinfer serve` (tests/e2e/serve.sh starts it):
// node client.mjs BASE_URL API_KEY EXPECTED_JSON
// EXPECTED_JSON maps prompts to what `dsinfer run --chat` answered greedily.
// Prints "ok ..." / "FAIL ..." lines; exits 1 on any failure.
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import fs from "node:fs";

const [base, key, expectedFile] = process.argv.slice(2);
const expected = JSON.parse(fs.readFileSync(expectedFile, "utf8"));
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0, timeout: 120000 });
const model = "tiny";
let failures = 0;
const ok = (what) => console.log("ok   " + what);
const fail = (what) => { failures++; console.log("FAIL " + what); };
const check = (cond, what) => (cond ? ok(what) : fail(what));

async function expectError(what, status, fn) {
  try {
    await fn();
    fail(`${what}: no error`);
  } catch (e) {
    check(e.status === status && e.error && typeof e.error.message === "string",
      `${what}: HTTP ${e.status} (want ${status}): ${e.error ? e.error.message : e.message}`);
  }
}

async function chat(prompt, extra = {}) {
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: prompt }], temperature: 0, max_tokens: 16, ...extra,
  });
  return r;
}

async function chatStream(prompt, extra = {}) {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: prompt }], temperature: 0, max_tokens: 16, stream: true,
    stream_options: { include_usage: true }, ...extra,
  });
  let content = "", finish = null, usage = null, role = null, lp = 0;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
      if (c.logprobs && c.logprobs.content) lp += c.logprobs.content.length;
    }
  }
  return { content, finish, usage, role, lp };
}

async function metric(name) {
  const text = await (await fetch(base + "/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith("dsinfer:" + name + "{"));
  return line ? Number(line.split(" ").pop()) : NaN;
}

// ---- models, the key ----
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === model, `models.list has ${model}`);
{ // a served name's alias (--served-model-name tiny,claude-x-alias): taken, the answer naming the first
  const a = await client.chat.completions.create({ model: "claude-x-alias", messages: [{ role: "user", content: "hi" }],
    max_tokens: 2 });
  const m = await client.models.retrieve("claude-x-alias");
  check(a.model === model && m.id === model, `an alias of the served name: answered as ${a.model}, /v1/models/{alias} ${m.id}`);
}
const noKey = new OpenAI({ baseURL: base + "/v1", apiKey: "wrong-key", maxRetries: 0 });
await expectError("a wrong API key", 401, () => noKey.models.list());
await expectError("a wrong API key on chat", 401, () =>
  noKey.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }] }));

// ---- greedy chat equals `dsinfer run --chat`, whole and streamed ----
const prompts = Object.keys(expected);
const whole = {};
for (const p of prompts) {
  const r = await chat(p);
  whole[p] = r.choices[0].message.content;
  check(whole[p] === expected[p], `chat "${p}" equals dsinfer run: ${JSON.stringify(whole[p])}`);
  check(r.usage.completion_tokens > 0 && r.usage.prompt_tokens > 0 &&
    r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, "chat usage adds up");
}
{
  const s = await chatStream(prompts[0]);
  check(s.content === whole[prompts[0]], `streamed chat equals the whole answer: ${JSON.stringify(s.content)}`);
  check(s.role === "assistant" && s.finish && s.usage && s.usage.completion_tokens > 0,
    `stream: role, finish_reason ${s.finish}, usage in the last chunk`);
}

// ---- 16 clients at once, each as alone ----
{
  const jobs = [];
  for (let i = 0; i < 16; i++) jobs.push(chatStream(prompts[i % prompts.length]));
  const res = await Promise.all(jobs);
  const same = res.every((r, i) => r.content === expected[prompts[i % prompts.length]]);
  check(same, "16 concurrent streaming clients each get what dsinfer run gives alone");
}

// ---- the Responses API: greedy as chat, whole and streamed; items in, refusals ----
{
  const p = prompts[1];
  const r = await client.responses.create({ model, input: p, temperature: 0, max_output_tokens: 16 });
  const msg = r.output.find((o) => o.type === "message");
  check(r.object === "response" && r.output_text === expected[p] && msg && msg.content[0].type === "output_text",
    `responses "${p}" equals dsinfer run: ${JSON.stringify(r.output_text)}`);
  check(r.usage.input_tokens > 0 && r.usage.output_tokens > 0 &&
    r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens &&
    (r.status === "completed" || (r.status === "incomplete" && r.incomplete_details.reason === "max_output_tokens")),
  `responses usage adds up, status ${r.status}`);
  // the SDK's stream helper checks each event against the items it has seen
  const events = [];
  const st = client.responses.stream({ model, input: p, temperature: 0, max_output_tokens: 16 });
  let deltas = "";
  for await (const ev of st) {
    events.push(ev.type);
    if (ev.type === "response.output_text.delta") deltas += ev.delta;
  }
  const fin = await st.finalResponse(); /* the snapshot the events built (the SDK adds no output_text to it) */
  const finText = fin.output.filter((o) => o.type === "message").map((o) => o.content[0].text).join("");
  const want = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
    "response.output_text.delta"];
  check(finText === r.output_text && deltas === r.output_text && want.every((t, i) => events[i] === t) &&
    /^response\.(completed|incomplete)$/.test(events[events.length - 1]) &&
    events.includes("response.output_item.done"), `streamed response: the same text, events ${[...new Set(events)]}`);
  // instructions and message items render as chat's system and user messages
  const chatAns = await client.chat.completions.create({ model, temperature: 0, max_tokens: 12, messages: [
    { role: "system", content: "Be brief." }, { role: "user", content: "Hello" },
    { role: "assistant", content: "Hi." }, { role: "user", content: p }] });
  const items = await client.responses.create({ model, temperature: 0, max_output_tokens: 12, instructions: "Be brief.",
    input: [{ role: "user", content: [{ type: "input_text", text: "Hello" }] },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Hi." }] },
      { role: "user", content: p }] });
  check(items.output_text === chatAns.choices[0].message.content,
    `responses from instructions and items equal chat's answer to the same messages: ${JSON.stringify(items.output_text)}`);
  // text.format json_schema: the answer holds to it
  const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"], additionalProperties: false };
  const j = await client.responses.create({ model, input: p, temperature: 1.0, seed: 100, max_output_tokens: 48,
    text: { format: { type: "json_schema", name: "t", schema, strict: true } } });
  let jo = null;
  try { jo = JSON.parse(j.output_text); } catch (e) { /* checked below */ }
  check(j.status === "incomplete" ? /^\s*\{/.test(j.output_text) : jo !== null && Number.isInteger(jo.n),
    `responses text.format json_schema (${j.status}): ${j.output_text}`);
  await expectError("responses: previous_response_id (nothing is stored)", 400, () =>
    client.responses.create({ model, input: "hi", previous_response_id: "resp_1" }));
  await expectError("responses: a built-in tool", 400, () =>
    client.responses.create({ model, input: "hi", tools: [{ type: "web_search" }] }));
  await expectError("responses: an image part", 400, () => client.responses.create({ model, input: [{ role: "user",
    content: [{ type: "input_image", image_url: "data:image/png;base64,AAAA" }] }] }));
  await expectError("responses: no input", 400, () => client.responses.create({ model }));
  await expectError("responses: a wrong key", 401, () => noKey.responses.create({ model, input: "hi" }));
  await expectError("responses: over the context", 400, () =>
    client.responses.create({ model, input: "word ".repeat(3000) }));
}

// ---- Anthropic's Messages API (its official client, the key as x-api-key): greedy as chat, whole and streamed ----
{
  const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 120000 });
  const textOf = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
  const p = prompts[2];
  const m = await anthropic.messages.create({ model, max_tokens: 16, temperature: 0,
    messages: [{ role: "user", content: p }] });
  const c = await chat(p);
  check(m.type === "message" && m.role === "assistant" && textOf(m) === expected[p] && m.id.startsWith("msg_") &&
    m.stop_reason === (c.choices[0].finish_reason === "length" ? "max_tokens" : "end_turn"),
  `messages "${p}" equals dsinfer run: ${JSON.stringify(textOf(m))}, ${m.stop_reason}`);
  check(m.usage.input_tokens + m.usage.cache_read_input_tokens === c.usage.prompt_tokens &&
    m.usage.output_tokens === c.usage.completion_tokens,
  `messages usage: ${m.usage.input_tokens} + ${m.usage.cache_read_input_tokens} cached in, ${m.usage.output_tokens} out`);
  const st = anthropic.messages.stream({ model, max_tokens: 16, temperature: 0, messages: [{ role: "user", content: p }] });
  let deltas = "";
  st.on("text", (t) => { deltas += t; });
  const fin = await st.finalMessage();
  check(textOf(fin) === textOf(m) && deltas === textOf(m) && fin.stop_reason === m.stop_reason &&
    fin.usage.output_tokens === m.usage.output_tokens, "messages, streamed (the SDK's MessageStream): the same message");
  // a system prompt and turns as blocks answer as chat answers the same messages
  const turns = [{ role: "user", content: [{ type: "text", text: "Hello" }] },
    { role: "assistant", content: [{ type: "text", text: "Hi." }] }, { role: "user", content: p }];
  const mt = await anthropic.messages.create({ model, max_tokens: 12, temperature: 0, system: "Be brief.",
    messages: turns });
  const ct = await client.chat.completions.create({ model, temperature: 0, max_tokens: 12, messages: [
    { role: "system", content: "Be brief." }, { role: "user", content: "Hello" }, { role: "assistant", content: "Hi." },
    { role: "user", content: p }] });
  check(textOf(mt) === ct.choices[0].message.content, `messages with system and turns equal chat's answer: ${JSON.stringify(textOf(mt))}`);
  const n = await anthropic.messages.countTokens({ model, system: "Be brief.", messages: turns });
  check(n.input_tokens === ct.usage.prompt_tokens, `count_tokens: ${n.input_tokens} as chat's prompt`);
  // a stop sequence inside the greedy answer: the answer up to it, stop_reason stop_sequence
  const full = expected[p], cut = [...full].findIndex((ch, i) => i >= 3 && /[a-z]/.test(ch));
  if (cut > 0) {
    const stop = [...full][cut], want = full.slice(0, full.indexOf(stop));
    const ms = await anthropic.messages.create({ model, max_tokens: 16, temperature: 0, stop_sequences: [stop],
      messages: [{ role: "user", content: p }] });
    check(ms.stop_reason === "stop_sequence" && ms.stop_sequence === stop && textOf(ms) === want,
      `messages stop_sequences ${JSON.stringify(stop)}: ${JSON.stringify(textOf(ms))}, ${ms.stop_reason}`);
  } else {
    fail(`no letter to stop at in ${JSON.stringify(full)}`);
  }
  // errors in Anthropic's shape
  const anthropicError = async (what, status, type, fn) => {
    try {
      await fn();
      fail(`${what}: no error`);
    } catch (e) {
      check(e.status === status && e.error && e.error.type === "error" && e.error.error.type === type &&
        typeof e.error.error.message === "string", `${what}: HTTP ${e.status} ${e.error && JSON.stringify(e.error)}`);
    }
  };
  const wrong = new Anthropic({ baseURL: base, apiKey: "wrong-key", maxRetries: 0 });
  await anthropicError("messages: a wrong key", 401, "authentication_error", () =>
    wrong.messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: "hi" }] }));
  await anthropicError("messages: no max_tokens", 400, "invalid_request_error", () =>
    anthropic.messages.create({ model, messages: [{ role: "user", content: "hi" }] }));
  await anthropicError("messages: an image block", 400, "invalid_request_error", () =>
    anthropic.messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: [{ type: "image",
      source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }] }));
  await anthropicError("messages: an unknown model", 404, "not_found_error", () =>
    anthropic.messages.create({ model: "claude-x", max_tokens: 4, messages: [{ role: "user", content: "hi" }] }));
  await anthropicError("messages: over the context", 400, "invalid_request_error", () =>
    anthropic.messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: "word ".repeat(3000) }] }));

  // ---- a prefill: chat's continue_final_message (vLLM's) and a last assistant message here ----
  const pre = [{ role: "user", content: p }, { role: "assistant", content: "The answer is" }];
  const api = (path, body) => fetch(base + path, { method: "POST", body: JSON.stringify(body),
    headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" } }).then((x) => x.json());
  const tk = await api("/tokenize", { messages: pre, continue_final_message: true });
  const shown = (await api("/detokenize", { tokens: tk.tokens })).prompt;
  check(shown.endsWith("<｜User｜>" + p + "<｜Assistant｜>The answer is"),
    `continue_final_message renders the assistant's text open: ${JSON.stringify(shown)}`);
  const cc = await client.chat.completions.create({ model, messages: pre, continue_final_message: true, max_tokens: 8,
    temperature: 0 });
  const raw = await client.completions.create({ model, prompt: tk.tokens, max_tokens: 8, temperature: 0 });
  check(cc.choices[0].message.content === raw.choices[0].text.trimEnd() && /^\s/.test(raw.choices[0].text) ===
    /^\s/.test(cc.choices[0].message.content), `continue_final_message: the continuation as completions gives it ` +
    `from the same tokens, its leading space kept: ${JSON.stringify(cc.choices[0].message.content)}`);
  const mp = await anthropic.messages.create({ model, max_tokens: 8, temperature: 0, messages: pre });
  check(textOf(mp) === cc.choices[0].message.content && mp.usage.input_tokens + mp.usage.cache_read_input_tokens ===
    tk.count, `messages ending with the assistant's text continue it: ${JSON.stringify(textOf(mp))}`);
}

// ---- logprobs ----
{
  const r = await chat(prompts[0], { logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs.content;
  check(lp.length === r.usage.completion_tokens && lp.every((t) => t.logprob <= 0 && t.top_logprobs.length === 3 &&
    t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob && Array.isArray(t.bytes)),
  `logprobs: one entry a token (${lp.length}), top_logprobs 3, sorted`);
  const s = await chatStream(prompts[0], { logprobs: true, top_logprobs: 2 });
  check(s.lp === s.usage.completion_tokens, `streamed logprobs: one a token (${s.lp})`);
}

// ---- response_format: each completion one JSON value of the shape asked, or its start when cut ----
// the choices that closed (stop) parse and pass shape; the rest are cut (length) after an opening brace
function judgeJson(choices, shape) {
  let closed = 0, ok = true;
  for (const c of choices) {
    const t = c.message.content;
    if (c.finish_reason === "stop") {
      let o = null;
      try { o = JSON.parse(t); } catch (e) { /* checked below */ }
      ok &&= o !== null && typeof o === "object" && shape(o);
      closed++;
    } else {
      ok &&= c.finish_reason === "length" && /^\s*\{/.test(t);
    }
  }
  return { closed, ok };
}
{
  const r = await chat(prompts[0], { response_format: { type: "json_object" }, temperature: 1.0, seed: 100, n: 4,
    max_tokens: 48 });
  const { closed, ok } = judgeJson(r.choices, (o) => !Array.isArray(o));
  check(ok && closed > 0, `response_format json_object: ${closed} of 4 objects closed (stop) and parse, the rest cut`);
  const s = await chatStream(prompts[0], { response_format: { type: "json_object" }, temperature: 1.0, seed: 100,
    max_tokens: 48 });
  check(s.content === r.choices[0].message.content, "response_format json_object, streamed: the same text");
}
// json_schema, and vLLM's guided_json
{
  const schema = { type: "object", properties: { n: { type: "integer" }, tag: { enum: ["a", "b"] } },
    required: ["n"], additionalProperties: false };
  const r = await chat(prompts[0], { response_format: { type: "json_schema", json_schema: { name: "t", schema } },
    temperature: 1.0, seed: 100, n: 4, max_tokens: 48 });
  const { closed, ok } = judgeJson(r.choices, (o) => Number.isInteger(o.n) &&
    Object.keys(o).every((k) => k === "n" || k === "tag") && (o.tag === undefined || o.tag === "a" || o.tag === "b"));
  check(ok && closed > 0, `response_format json_schema: ${closed} of 4 values closed (stop), each of the schema`);
  const g = await chat(prompts[0], { guided_json: { type: "array", items: { type: "boolean" }, maxItems: 2 },
    temperature: 1.0, seed: 5, n: 4, max_tokens: 48 });
  check(g.choices.every((c) => {
    let a = null;
    try { a = JSON.parse(c.message.content); } catch (e) { /* false below */ }
    return c.finish_reason === "stop" && Array.isArray(a) && a.length <= 2 && a.every((b) => typeof b === "boolean");
  }), "guided_json: 4 arrays of at most 2 booleans, each closed");
  // a pattern: every string written matches it as JavaScript reads it
  const code = /^[A-Z]{2}-\d{3}$/u, note = /(ok|no)\./u;
  const p = await chat(prompts[0], { guided_json: { type: "object", properties: { code: { type: "string",
    pattern: code.source }, note: { type: "string", pattern: note.source, maxLength: 12 } }, required: ["code", "note"],
  additionalProperties: false }, temperature: 1.0, seed: 7, n: 4, max_tokens: 64 });
  const { closed: pc, ok: pok } = judgeJson(p.choices, (o) => code.test(o.code) && note.test(o.note) &&
    [...o.note].length <= 12);
  check(pok && pc > 0, `json_schema with patterns: ${pc} of 4 values closed, each string matching its pattern ` +
    `(${p.choices.map((c) => c.message.content).join(" | ")})`);
}
// vLLM's guided_choice and guided_regex: the text one of the strings, or matching the expression as a whole
{
  const choices = ["positive", "negative", "neutral (mixed)"];
  const r = await chat(prompts[0], { guided_choice: choices, temperature: 1.0, seed: 11, n: 4, max_tokens: 16 });
  check(r.choices.every((c) => c.finish_reason === "stop" && choices.includes(c.message.content)),
    `guided_choice: 4 answers, each one of the choices whole (${r.choices.map((c) => c.message.content).join(" | ")})`);
  const re = "[A-Z][a-z]{1,8}( [a-z]{1,8}){0,4}[.!]", whole = new RegExp(`^(?:${re})$`, "u");
  const g = await chat(prompts[0], { guided_regex: re, temperature: 1.0, seed: 12, n: 4, max_tokens: 24 });
  check(g.choices.every((c) => c.finish_reason === "stop" && whole.test(c.message.content)),
    `guided_regex: 4 answers, each closed and matching it whole (${g.choices.map((c) => c.message.content).join(" | ")})`);
}

// ---- tool_choice naming a function, or required: the arguments sampled under the function's parameters, the
// call closed by the server ----
{
  const tools = [{ type: "function", function: { name: "pick", parameters: { type: "object",
    properties: { color: { enum: ["red", "green"] }, n: { type: "integer" } }, required: ["color"],
    additionalProperties: false } } },
  { type: "function", function: { name: "halt", parameters: { type: "object", properties: { why: { type: "string",
    maxLength: 3 } }, required: ["why"], additionalProperties: false } } }];
  const valid = { pick: (a) => ["red", "green"].includes(a.color) && (a.n === undefined || Number.isInteger(a.n)) &&
    Object.keys(a).every((k) => k === "color" || k === "n"),
  halt: (a) => typeof a.why === "string" && [...a.why].length <= 3 && Object.keys(a).length === 1 };
  for (const [tc, what] of [[{ type: "function", function: { name: "pick" } }, "naming pick"], ["required", "required"]]) {
    const r = await chat(prompts[0], { tools, tool_choice: tc, temperature: 1.0, seed: 3, n: 4, max_tokens: 48 });
    let calls = 0, ok = true;
    const names = new Set();
    for (const c of r.choices) {
      if (c.finish_reason !== "tool_calls") continue; /* cut at max_tokens: no call */
      calls++;
      const t = c.message.tool_calls;
      let a = null;
      try { a = JSON.parse(t[0].function.arguments); } catch (e) { /* checked below */ }
      const f = t[0].function.name;
      names.add(f);
      ok &&= t.length === 1 && (what === "required" || f === "pick") && valid[f] !== undefined && a !== null && valid[f](a);
    }
    check(ok && calls > 0, `tool_choice ${what}: ${calls} of 4 sampled calls closed (${[...names]}), each's arguments ` +
      "of its function's parameters");
  }
}

// ---- sampling: a seed repeats, n completions ----
{
  const a = await chat(prompts[1], { temperature: 1.0, seed: 7, n: 3 });
  const b = await chat(prompts[1], { temperature: 1.0, seed: 7, n: 3 });
  check(a.choices.length === 3 && a.choices.every((c, i) => c.message.content === b.choices[i].message.content),
    "n = 3 with a seed: the same three answers twice");
}

// ---- completions ----
{
  const r = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
  const text = r.choices[0].text;
  const st = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 12, temperature: 0,
    stream: true });
  let streamed = "";
  for await (const c of st) streamed += c.choices[0] ? c.choices[0].text : "";
  check(streamed === text && r.usage.completion_tokens > 0, `completions, streamed as whole: ${JSON.stringify(text)}`);
  const e = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 12, temperature: 0,
    echo: true });
  check(e.choices[0].text === "Once upon a time" + text, "completions with echo");
  // echo with logprobs: the prompt's tokens too, the first without one
  // (how lm-evaluation-harness scores a continuation), the same logprobs
  // whether the prompt comes alone (max_tokens 0) or before a completion
  const el = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 12, temperature: 0,
    echo: true, logprobs: 2 });
  const lp = el.choices[0].logprobs, np = el.usage.prompt_tokens;
  const plain = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 12, temperature: 0,
    logprobs: 2 });
  check(el.choices[0].text === "Once upon a time" + text && lp.tokens.length === np + el.usage.completion_tokens &&
    lp.token_logprobs[0] === null && lp.top_logprobs[0] === null &&
    // (tokens of the same text share one key of a top_logprobs object)
    lp.token_logprobs.slice(1).every((x, k) => x <= 0 && (Object.keys(lp.top_logprobs[k + 1]).length < 2 ||
      x <= Math.max(...Object.values(lp.top_logprobs[k + 1])) + 1e-6)) &&
    lp.text_offset.every((o, k) => k === 0 || o >= lp.text_offset[k - 1]),
  `echo with logprobs: ${lp.tokens.length} tokens, the prompt's ${np} first (the first null)`);
  const gen = lp.token_logprobs.slice(np), pgen = plain.choices[0].logprobs.token_logprobs;
  check(gen.length === pgen.length && gen.every((x, k) => Math.abs(x - pgen[k]) < 1e-5),
    "echo with logprobs: the completion's logprobs as without echo");
  const po = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 0, echo: true,
    logprobs: 1 });
  const pl = po.choices[0].logprobs.token_logprobs;
  check(po.choices[0].text === "Once upon a time" && po.usage.completion_tokens === 0 && pl.length === np &&
    po.choices[0].finish_reason === "length" && pl.every((x, k) => k === 0 ? x === null : Math.abs(x - lp.token_logprobs[k]) < 1e-4),
  "max_tokens 0 with echo: the prompt alone, its logprobs as before");
  const ps = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 12, temperature: 0,
    echo: true, logprobs: 2, stream: true });
  let stext = "", stoks = [], slps = [];
  for await (const c of ps) {
    const ch = c.choices[0];
    if (!ch) continue;
    stext += ch.text;
    if (ch.logprobs) stoks.push(...ch.logprobs.tokens), slps.push(...ch.logprobs.token_logprobs);
  }
  check(stext === el.choices[0].text && stoks.join("\u0001") === lp.tokens.join("\u0001") &&
    slps.every((x, k) => x === lp.token_logprobs[k]), "echo with logprobs, streamed: the same tokens and logprobs");
  const ids = await client.completions.create({ model, prompt: [5, 6, 7, 8], max_tokens: 4, temperature: 0 });
  check(ids.usage.prompt_tokens === 4 && ids.choices[0].text.length > 0, "completions from token ids");
}

// ---- errors ----
await expectError("a prompt over the context", 400, () =>
  client.chat.completions.create({ model, messages: [{ role: "user", content: "word ".repeat(3000) }] }));
await expectError("max_tokens past the context", 400, () => chat(prompts[0], { max_tokens: 100000 }));
await expectError("temperature as a string", 400, () => chat(prompts[0], { temperature: "hot" }));
await expectError("an unknown model", 404, () =>
  client.chat.completions.create({ model: "gpt-9", messages: [{ role: "user", content: "hi" }] }));
await expectError("a message without a role", 400, () =>
  client.chat.completions.create({ model, messages: [{ content: "hi" }] }));

// ---- abort mid-stream: the request is cancelled, its KV blocks freed ----
// The client aborts as soon as the response starts; the tiny model writes
// a whole answer in a fraction of a second, so an abort can come after its
// end: up to three tries for one that lands (the server counts it under
// finished_reason "abort"), each counted from its own start and given 2 s
// for the count to appear once the request has left the running set (a
// count that appeared after its try's wait would have shown in the next).
{
  const abortLine = async () => {
    const text = await (await fetch(base + "/metrics")).text();
    const line = text.split("\n").find((l) => l.startsWith("dsinfer:request_success_total{finished_reason=\"abort\""));
    return line ? Number(line.split(" ").pop()) : NaN;
  };
  let landed = 0, tries = 0, running = NaN, usage = NaN;
  for (; tries < 3 && !landed; tries++) {
    const before = await abortLine();
    const controller = new AbortController();
    try {
      const stream = await client.chat.completions.create({
        model, messages: [{ role: "user", content: "a long answer please" }], max_tokens: 480, ignore_eos: true,
        stream: true,
      }, { signal: controller.signal });
      controller.abort();
      for await (const chunk of stream) void chunk;
    } catch (e) {
      // the client's own abort
    }
    for (let i = 0; i < 100; i++) {
      running = await metric("num_requests_running");
      usage = await metric("kv_cache_usage_perc");
      landed = (await abortLine()) - before;
      if (running === 0 && usage === 0 && (landed >= 1 || i >= 40)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  check(landed === 1 && running === 0 && usage === 0,
    `a stream aborted by its client (try ${tries}): ${landed} counted as aborted, then running ${running}, KV blocks held ${usage}`);
}

console.log(failures ? `${failures} failed` : "all passed");
process.exit(failures ? 1 : 0);
