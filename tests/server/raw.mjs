// `dsinfer serve` over plain HTTP (tests/e2e/serve.sh starts it): node raw.mjs BASE_URL API_KEY
// The routes beside the API, and malformed requests: each must get its 4xx
// and an OpenAI error object, and the server must go on answering.
// Prints "ok ..." / "FAIL ..." lines; exits 1 on any failure.
const [base, key] = process.argv.slice(2);
let failures = 0;
const ok = (what) => console.log("ok   " + what);
const fail = (what) => { failures++; console.log("FAIL " + what); };
const check = (cond, what) => (cond ? ok(what) : fail(what));
const auth = { Authorization: "Bearer " + key, "Content-Type": "application/json" };

async function post(path, body, headers = auth) {
  const r = await fetch(base + path, { method: "POST", headers, body });
  let j = null;
  const text = await r.text();
  try { j = JSON.parse(text); } catch (e) { /* not JSON */ }
  return { status: r.status, j, text };
}

// ---- the routes ----
{
  const h = await fetch(base + "/health");
  check(h.status === 200, "GET /health");
  const page = await fetch(base + "/");
  const html = await page.text();
  check(page.status === 200 && page.headers.get("content-type").startsWith("text/html") && html.includes("/v1/chat/completions"),
    "GET / is the chat page");
  const m = await (await fetch(base + "/metrics")).text();
  const names = ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prefix_cache_queries",
    "prefix_cache_hits", "prompt_tokens_total", "generation_tokens_total", "request_success_total",
    "time_to_first_token_seconds_bucket", "inter_token_latency_seconds_bucket", "e2e_request_latency_seconds_count"];
  check(names.every((n) => m.includes("dsinfer:" + n)), "GET /metrics has vLLM's metrics under dsinfer:");
  const t = await post("/tokenize", JSON.stringify({ prompt: "hello world" }));
  const d = await post("/detokenize", JSON.stringify({ tokens: t.j.tokens }));
  check(t.status === 200 && t.j.count === t.j.tokens.length && d.j.prompt.endsWith("hello world"),
    `tokenize / detokenize round trip: ${JSON.stringify(d.j && d.j.prompt)}`);
  const tm = await post("/tokenize", JSON.stringify({ messages: [{ role: "user", content: "hi" }] }));
  check(tm.status === 200 && tm.j.count > 2, "tokenize a chat");
  const nf = await fetch(base + "/v1/nothing", { headers: auth });
  check(nf.status === 404, "an unknown route: 404");
  const wm = await fetch(base + "/v1/chat/completions", { headers: auth });
  check(wm.status === 405, "GET on a POST route: 405");
  const noauth = await fetch(base + "/v1/models");
  check(noauth.status === 401, "/v1/models without the key: 401");
}

// ---- malformed requests ----
const good = { messages: [{ role: "user", content: "hi" }], max_tokens: 2 };
const bad = [
  ["an empty body", ""],
  ["truncated JSON", "{\"messages\": [{\"role\": \"user\""],
  ["an array", "[]"],
  ["null", "null"],
  ["a string", "\"hello\""],
  ["no messages", "{}"],
  ["empty messages", JSON.stringify({ messages: [] })],
  ["messages not an array", JSON.stringify({ messages: "hi" })],
  ["a message not an object", JSON.stringify({ messages: [5] })],
  ["content a number", JSON.stringify({ messages: [{ role: "user", content: 5 }] })],
  ["an image part", JSON.stringify({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] })],
  ["an unknown role", JSON.stringify({ messages: [{ role: "wizard", content: "x" }] })],
  ["a role not a string", JSON.stringify({ messages: [{ role: 1, content: "x" }] })],
  ["a tool call without a name", JSON.stringify({ messages: [{ role: "assistant", content: "", tool_calls: [{ function: {} }] }] })],
  ["negative max_tokens", JSON.stringify({ ...good, max_tokens: -1 })],
  ["fractional max_tokens", JSON.stringify({ ...good, max_tokens: 1.5 })],
  ["n of 0", JSON.stringify({ ...good, n: 0 })],
  ["n of 1000", JSON.stringify({ ...good, n: 1000 })],
  ["top_p of 2", JSON.stringify({ ...good, top_p: 2 })],
  ["temperature -1", JSON.stringify({ ...good, temperature: -1 })],
  ["temperature a string", JSON.stringify({ ...good, temperature: "0.5" })],
  ["stop a number", JSON.stringify({ ...good, stop: 5 })],
  ["stop with a number", JSON.stringify({ ...good, stop: ["a", 5] })],
  ["seventeen stops", JSON.stringify({ ...good, stop: Array(17).fill("x") })],
  ["logit_bias with a word", JSON.stringify({ ...good, logit_bias: { abc: 1 } })],
  ["logit_bias past the vocabulary", JSON.stringify({ ...good, logit_bias: { "99999999": 1 } })],
  ["logit_bias of 500", JSON.stringify({ ...good, logit_bias: { "5": 500 } })],
  ["stop_token_ids negative", JSON.stringify({ ...good, stop_token_ids: [-3] })],
  ["tools not an array", JSON.stringify({ ...good, tools: "x" })],
  ["tool_choice a number", JSON.stringify({ ...good, tool_choice: 5 })],
  ["response_format a string", JSON.stringify({ ...good, response_format: "json" })],
  ["guided_regex with a lookahead", JSON.stringify({ ...good, guided_regex: "a(?=b)" })],
  ["guided_regex a number", JSON.stringify({ ...good, guided_regex: 5 })],
  ["guided_choice empty", JSON.stringify({ ...good, guided_choice: [] })],
  ["guided_choice of numbers", JSON.stringify({ ...good, guided_choice: [1, 2] })],
  ["guided_choice beside guided_json", JSON.stringify({ ...good, guided_choice: ["a"], guided_json: { type: "object" } })],
  ["response_format json_schema with uniqueItems", JSON.stringify({ ...good, response_format: { type: "json_schema",
    json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "array", uniqueItems: true } } } } } })],
  ["response_format json_schema without its schema", JSON.stringify({ ...good, response_format: { type: "json_schema",
    json_schema: { name: "x" } } })],
  ["response_format json_schema of a bare number", JSON.stringify({ ...good, response_format: { type: "json_schema",
    json_schema: { name: "x", schema: { type: "number" } } } })],
  ["guided_json a string that is not JSON", JSON.stringify({ ...good, guided_json: "{type" })],
  ["guided_json with response_format json_object", JSON.stringify({ ...good, guided_json: { type: "object" },
    response_format: { type: "json_object" } })],
  ["response_format of an unknown type", JSON.stringify({ ...good, response_format: { type: "yaml" } })],
  ["response_format json_object with a tool required", JSON.stringify({ ...good, response_format: { type: "json_object" },
    tools: [{ type: "function", function: { name: "f", parameters: {} } }], tool_choice: "required" })],
  ["stream a string", JSON.stringify({ ...good, stream: "yes" })],
  ["stream_options a string", JSON.stringify({ ...good, stream_options: "x" })],
  ["top_logprobs without logprobs", JSON.stringify({ ...good, top_logprobs: 3 })],
  ["top_logprobs 50", JSON.stringify({ ...good, logprobs: true, top_logprobs: 50 })],
  ["seed a string", JSON.stringify({ ...good, seed: "x" })],
  ["a huge number", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1e400}"],
  ["nesting 5000 deep", "[".repeat(5000) + "]".repeat(5000)],
  ["chat_template_kwargs a list", JSON.stringify({ ...good, chat_template_kwargs: [1] })],
  ["continue_final_message a string", JSON.stringify({ ...good, continue_final_message: "yes" })],
  ["continue_final_message after a user message", JSON.stringify({ ...good, continue_final_message: true })],
  ["continue_final_message with json output", JSON.stringify({ messages: [{ role: "user", content: "hi" },
    { role: "assistant", content: "{" }], continue_final_message: true, response_format: { type: "json_object" } })],
];
for (const [what, body] of bad) {
  const r = await post("/v1/chat/completions", body);
  check(r.status === 400 && r.j && r.j.error && typeof r.j.error.message === "string",
    `${what}: ${r.status} ${r.j && r.j.error ? r.j.error.message : r.text.slice(0, 80)}`);
}
{ // a schema keyword not enforced, a pattern that cannot be followed: the 400 names it and its place
  const r = await post("/v1/chat/completions", JSON.stringify({ ...good, response_format: { type: "json_schema",
    json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "string", pattern: "^(?!x)" } } } } } }));
  check(r.status === 400 && r.j.error.param === "response_format" &&
    /\/properties\/a: 'pattern': lookaround/.test(r.j.error.message),
    `json_schema with a lookahead in a pattern: ${r.status} ${r.j && r.j.error ? r.j.error.message : ""}`);
}
const badc = [
  ["no prompt", JSON.stringify({ max_tokens: 2 })],
  ["a prompt number", JSON.stringify({ prompt: 5 })],
  ["ids past the vocabulary", JSON.stringify({ prompt: [1, 2, 99999999] })],
  ["an empty prompt list", JSON.stringify({ prompt: [] })],
  ["suffix without FIM tokens in the tokenizer", JSON.stringify({ prompt: "x", suffix: "y" })],
  ["max_tokens 0 without echo", JSON.stringify({ prompt: "x", max_tokens: 0 })],
  ["best_of above n", JSON.stringify({ prompt: "x", best_of: 3 })],
];
for (const [what, body] of badc) {
  const r = await post("/v1/completions", body);
  check(r.status === 400 && r.j && r.j.error, `completions, ${what}: ${r.status} ${r.j && r.j.error ? r.j.error.message : ""}`);
}
const badr = [
  ["not JSON", "{\"input\": "],
  ["input a number", JSON.stringify({ input: 5 })],
  ["input an empty list", JSON.stringify({ input: [] })],
  ["an item not an object", JSON.stringify({ input: ["hi"] })],
  ["a message without a role", JSON.stringify({ input: [{ content: "hi" }] })],
  ["a tool role message", JSON.stringify({ input: [{ role: "tool", content: "hi" }] })],
  ["content a number", JSON.stringify({ input: [{ role: "user", content: 3 }] })],
  ["a part without its text", JSON.stringify({ input: [{ role: "user", content: [{ type: "input_text" }] }] })],
  ["a function_call without arguments", JSON.stringify({ input: [{ type: "function_call", call_id: "c", name: "f" }] })],
  ["a function_call_output without call_id", JSON.stringify({ input: [{ type: "function_call_output", output: "x" }] })],
  ["an unknown item type", JSON.stringify({ input: [{ type: "computer_call" }] })],
  ["instructions a number", JSON.stringify({ input: "hi", instructions: 1 })],
  ["max_output_tokens a string", JSON.stringify({ input: "hi", max_output_tokens: "9" })],
  ["max_output_tokens 0", JSON.stringify({ input: "hi", max_output_tokens: 0 })],
  ["tools an object", JSON.stringify({ input: "hi", tools: {} })],
  ["a function tool without a name", JSON.stringify({ input: "hi", tools: [{ type: "function" }] })],
  ["tool_choice a number", JSON.stringify({ input: "hi", tool_choice: 1 })],
  ["tool_choice a word", JSON.stringify({ input: "hi", tool_choice: "sometimes" })],
  ["text.format without a type", JSON.stringify({ input: "hi", text: { format: {} } })],
  ["text.format json_schema without a schema", JSON.stringify({ input: "hi", text: { format: { type: "json_schema" } } })],
  ["temperature a string", JSON.stringify({ input: "hi", temperature: "hot" })],
  ["conversation", JSON.stringify({ input: "hi", conversation: "conv_1" })],
  ["background", JSON.stringify({ input: "hi", background: true })],
  ["top_logprobs", JSON.stringify({ input: "hi", top_logprobs: 2 })],
];
for (const [what, body] of badr) {
  const r = await post("/v1/responses", body);
  check(r.status === 400 && r.j && r.j.error && typeof r.j.error.message === "string",
    `responses, ${what}: ${r.status} ${r.j && r.j.error ? r.j.error.message : r.text.slice(0, 80)}`);
}
const u = (content) => [{ role: "user", content }];
const badm = [
  ["not JSON", "{\"messages\": "],
  ["no messages", JSON.stringify({ max_tokens: 4 })],
  ["no max_tokens", JSON.stringify({ messages: u("hi") })],
  ["messages an object", JSON.stringify({ max_tokens: 4, messages: {} })],
  ["a system role", JSON.stringify({ max_tokens: 4, messages: [{ role: "system", content: "hi" }] })],
  ["a message not an object", JSON.stringify({ max_tokens: 4, messages: ["hi"] })],
  ["content a number", JSON.stringify({ max_tokens: 4, messages: u(7) })],
  ["a block without a type", JSON.stringify({ max_tokens: 4, messages: u([{ text: "hi" }]) })],
  ["a document block", JSON.stringify({ max_tokens: 4, messages: u([{ type: "document" }]) })],
  ["a tool_result without its id", JSON.stringify({ max_tokens: 4, messages: u([{ type: "tool_result", content: "x" }]) })],
  ["a tool_result of an image", JSON.stringify({ max_tokens: 4, messages: u([{ type: "tool_result", tool_use_id: "t",
    content: [{ type: "image" }] }]) })],
  ["a tool_use without input", JSON.stringify({ max_tokens: 4, messages: [{ role: "user", content: "hi" },
    { role: "assistant", content: [{ type: "tool_use", id: "t", name: "f" }] }] })],
  ["a tool_use in a user message", JSON.stringify({ max_tokens: 4, messages: u([{ type: "tool_use", id: "t", name: "f",
    input: {} }]) })],
  ["system a number", JSON.stringify({ max_tokens: 4, messages: u("hi"), system: 3 })],
  ["system of image blocks", JSON.stringify({ max_tokens: 4, messages: u("hi"), system: [{ type: "image" }] })],
  ["stop_sequences a string", JSON.stringify({ max_tokens: 4, messages: u("hi"), stop_sequences: "x" })],
  ["a server tool", JSON.stringify({ max_tokens: 4, messages: u("hi"), tools: [{ type: "web_search_20250305",
    name: "web_search" }] })],
  ["a tool without input_schema", JSON.stringify({ max_tokens: 4, messages: u("hi"), tools: [{ name: "f" }] })],
  ["tool_choice a string", JSON.stringify({ max_tokens: 4, messages: u("hi"), tool_choice: "auto" })],
  ["tool_choice tool without a name", JSON.stringify({ max_tokens: 4, messages: u("hi"), tool_choice: { type: "tool" } })],
  ["thinking of an unknown type", JSON.stringify({ max_tokens: 4, messages: u("hi"), thinking: { type: "deep" } })],
  ["temperature a string", JSON.stringify({ max_tokens: 4, messages: u("hi"), temperature: "hot" })],
  ["max_tokens 0", JSON.stringify({ max_tokens: 0, messages: u("hi") })],
  ["mcp_servers", JSON.stringify({ max_tokens: 4, messages: u("hi"), mcp_servers: [{}] })],
];
for (const [what, body] of badm) {
  const r = await post("/v1/messages", body);
  check(r.status === 400 && r.j && r.j.type === "error" && r.j.error.type === "invalid_request_error" &&
    typeof r.j.error.message === "string", `messages, ${what}: ${r.status} ${r.j && r.j.error ? r.j.error.message : r.text.slice(0, 80)}`);
}
{ // a translated request's errors name its own fields, not chat's
  const named = [
    ["/v1/responses", { input: "hi", max_output_tokens: 100000 }, "max_output_tokens", /max_output_tokens asks for more/],
    ["/v1/responses", { input: "word ".repeat(3000) }, "input", /maximum context length/],
    ["/v1/responses", { input: "hi", text: { format: { type: "json_schema", name: "x", schema: { type: "integer",
      multipleOf: 3 } } } }, "text.format", /^'text\.format': json_schema at \/: 'multipleOf'/],
    ["/v1/messages", { max_tokens: 4, messages: u("hi"), stop_sequences: Array(17).fill("x") }, "stop_sequences",
      /^'stop_sequences' holds at most 16/],
  ];
  for (const [path, body, param, re] of named) {
    const r = await post(path, JSON.stringify(body));
    const e = r.j && r.j.error, msg = e && e.message;
    check(r.status === 400 && (path === "/v1/messages" || e.param === param) && re.test(msg),
      `${path}: ${param} named in its error: ${msg}`);
  }
}
{
  const r = await post("/v1/messages/count_tokens", JSON.stringify({ messages: u("hi") }));
  check(r.status === 200 && r.j.input_tokens > 1, `count_tokens without max_tokens: ${r.text}`);
  // a prompt over the context: counted (the client asks how long it is), refused to generate
  const long = u("word ".repeat(3000));
  const rl = await post("/v1/messages/count_tokens", JSON.stringify({ messages: long }));
  const gl = await post("/v1/messages", JSON.stringify({ max_tokens: 2, messages: long }));
  check(rl.status === 200 && rl.j.input_tokens > 3000 && gl.status === 400 && /maximum context length/.test(gl.text),
    `count_tokens over the context: ${rl.text.slice(0, 80)}; generating: ${gl.status}`);
  const k = await post("/v1/messages", JSON.stringify({ max_tokens: 2, messages: u("hi") }),
    { "x-api-key": key, "Content-Type": "application/json" });
  check(k.status === 200 && k.j.type === "message", "the key as x-api-key: 200");
}
{
  const big = "x".repeat(17 << 20);
  const r = await post("/v1/chat/completions", big);
  check(r.status === 413 && r.j && r.j.error, `a 17 MB body: ${r.status}`);
  const inv = Buffer.concat([Buffer.from("{\"messages\":[{\"role\":\"user\",\"content\":\"a"), Buffer.from([0xff, 0xfe]),
    Buffer.from("b\"}],\"max_tokens\":2}")]);
  const ri = await fetch(base + "/v1/chat/completions", { method: "POST", headers: auth, body: inv });
  check(ri.status === 200 || ri.status === 400, `invalid UTF-8 in content: ${ri.status}`);
}
// and it still answers
{
  const r = await post("/v1/chat/completions", JSON.stringify(good));
  check(r.status === 200 && r.j.choices[0].message.role === "assistant", "a good request after all that: 200");
  const rr = await post("/v1/responses", JSON.stringify({ input: "hi", max_output_tokens: 2 }));
  check(rr.status === 200 && rr.j.object === "response" && rr.j.output.length === 1, "a good response after all that: 200");
  const rm = await post("/v1/messages", JSON.stringify({ max_tokens: 2, messages: u("hi") }));
  check(rm.status === 200 && rm.j.type === "message" && rm.j.content.length === 1, "a good message after all that: 200");
  const h = await fetch(base + "/health");
  check(h.status === 200, "healthy");
  // the engine loop's counters: steps run, their time, the forward passes' part of it
  const m = await (await fetch(base + "/metrics")).text();
  const v = (n) => Number((m.match(new RegExp(`^dsinfer:${n}\\{[^}]*\\} (\\S+)$`, "m")) || [])[1]);
  const [steps, ss, fs] = ["engine_steps_total", "engine_step_seconds_total", "engine_forward_seconds_total"].map(v);
  check(steps >= 3 && fs > 0 && ss >= fs, `engine counters: ${steps} steps, ${ss} s in steps, ${fs} s forward`);
}
console.log(failures ? `${failures} failed` : "all passed");
process.exit(failures ? 1 : 0);
