// Reasoning and tool calls through the official OpenAI client, against a
// server whose model answers every request with the same script (reasoning,
// then a DeepSeek tool call: tests/unit/test_server.c starts it):
// node tools.mjs BASE_URL API_KEY [required | named]. With required (named),
// the script is a call without its opening (without its opening and name),
// which only tool_choice "required" (naming get_weather) makes a call.
// Exits 1 on any failure.
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const [base, key, mode] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0 });
const model = "tiny";
let failures = 0;
const ok = (what) => console.log("ok   " + what);
const fail = (what) => { failures++; console.log("FAIL " + what); };
const check = (cond, what) => (cond ? ok(what) : fail(what));

const reasoning = "The user wants the weather; I should call the tool.";
const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] },
  },
}];
const ask = [{ role: "user", content: "What is the weather in Paris?" }];

// the tool calls a stream's deltas add up to, its content and finish_reason
async function streamed(params) {
  const stream = await client.chat.completions.create({ model, messages: ask, tools, temperature: 0, stream: true,
    ...params });
  let rs = "", content = "", finish = null, chunks = 0;
  const calls = [];
  for await (const chunk of stream) {
    chunks++;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.reasoning_content) rs += c.delta.reasoning_content;
    if (c.delta.content) content += c.delta.content;
    for (const tc of c.delta.tool_calls || []) {
      const k = tc.index;
      calls[k] = calls[k] || { id: "", name: "", arguments: "" };
      if (tc.id) calls[k].id = tc.id;
      if (tc.function && tc.function.name) calls[k].name += tc.function.name;
      if (tc.function && tc.function.arguments) calls[k].arguments += tc.function.arguments;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { rs, content, finish, chunks, calls };
}

// the Responses API's function tools, and a response's items as its stream builds them
const rtools = tools.map((t) => ({ type: "function", ...t.function }));
async function responded(params) {
  const st = client.responses.stream({ model, input: "What is the weather in Paris?", tools: rtools, temperature: 0,
    ...params });
  let rs = "", args = "";
  for await (const ev of st) {
    if (ev.type === "response.reasoning_text.delta") rs += ev.delta;
    if (ev.type === "response.function_call_arguments.delta") args += ev.delta;
  }
  return { rs, args, fin: await st.finalResponse() };
}
// the items' shape: their kinds, the calls (name, arguments, ids' forms, status), the reasoning's text
const shape = (out) => ({
  kinds: out.map((o) => o.type).join(","),
  call: out.filter((o) => o.type === "function_call").map((o) => [o.name, o.arguments, /^call_/.test(o.call_id),
    /^fc_/.test(o.id), o.status].join("|")),
  rs: out.filter((o) => o.type === "reasoning").map((o) => o.content[0].text).join(""),
});

// Anthropic's Messages API: the tools with input_schema, a message's blocks as its stream builds them
const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
const mtools = tools.map((t) => ({ name: t.function.name, description: t.function.description,
  input_schema: t.function.parameters }));
const askM = [{ role: "user", content: "What is the weather in Paris?" }];
const blocks = (m) => m.content.map((b) => b.type === "thinking" ? `thinking:${b.thinking}` : b.type === "text" ?
  `text:${b.text}` : `tool_use:${b.name}:${JSON.stringify(b.input)}:${/^toolu_/.test(b.id)}`).join("|");
async function messaged(params) {
  const st = anthropic.messages.stream({ model, max_tokens: 200, messages: askM, tools: mtools, temperature: 0,
    ...params });
  let json = "", thinking = "";
  st.on("inputJson", (partial) => { json += partial; });
  st.on("thinking", (delta) => { thinking += delta; });
  const fin = await st.finalMessage();
  return { json, thinking, fin };
}

// ---- tool_choice required, or naming the function: the answer starts with the call ----
if (mode) {
  const tc = mode === "named" ? { type: "function", function: { name: "get_weather" } } : "required";
  const r = await client.chat.completions.create({ model, messages: ask, tools, tool_choice: tc, temperature: 0 });
  const m = r.choices[0].message, c = m.tool_calls && m.tool_calls[0];
  let a = null;
  try { a = JSON.parse(c.function.arguments); } catch (e) { /* checked below */ }
  check(m.tool_calls && m.tool_calls.length === 1 && c.function.name === "get_weather" && a && a.city === "Paris" &&
    m.content === null && r.choices[0].finish_reason === "tool_calls",
  `tool_choice ${JSON.stringify(tc)}: the call made: ${JSON.stringify(m.tool_calls)}`);
  const s = await streamed({ tool_choice: tc });
  check(s.calls.length === 1 && s.calls[0].name === "get_weather" && s.calls[0].arguments === c.function.arguments &&
    s.content === "" && s.finish === "tool_calls", `tool_choice ${mode}, streamed: the same call: ${JSON.stringify(s.calls)}`);
  {
    const rtc = mode === "named" ? { type: "function", name: "get_weather" } : "required";
    const w = await client.responses.create({ model, input: "What is the weather in Paris?", tools: rtools,
      tool_choice: rtc, temperature: 0 });
    const f = w.output.find((o) => o.type === "function_call");
    const s2 = await responded({ tool_choice: rtc });
    check(f && f.name === "get_weather" && f.arguments === c.function.arguments && !w.output.some((o) => o.type === "message") &&
      JSON.stringify(shape(s2.fin.output)) === JSON.stringify(shape(w.output)),
    `responses, tool_choice ${JSON.stringify(rtc)}: the same call, whole and streamed: ${JSON.stringify(shape(w.output))}`);
  }
  {
    const mtc = mode === "named" ? { type: "tool", name: "get_weather" } : { type: "any" };
    const w = await anthropic.messages.create({ model, max_tokens: 200, messages: askM, tools: mtools,
      tool_choice: mtc, temperature: 0 });
    const u = w.content.find((b) => b.type === "tool_use");
    const s3 = await messaged({ tool_choice: mtc });
    check(u && u.name === "get_weather" && JSON.stringify(u.input) === JSON.stringify(JSON.parse(c.function.arguments)) &&
      w.stop_reason === "tool_use" && blocks(s3.fin) === blocks(w) && s3.fin.stop_reason === "tool_use",
    `messages, tool_choice ${JSON.stringify(mtc)}: the same call, whole and streamed: ${blocks(w)}`);
  }
  const auto = await client.chat.completions.create({ model, messages: ask, tools, temperature: 0 });
  check(!auto.choices[0].message.tool_calls && auto.choices[0].message.content,
    `tool_choice auto on the same output: no call, text (${JSON.stringify(auto.choices[0].message.content.slice(0, 40))})`);
  const err = async (body, what) => {
    const x = await fetch(base + "/v1/chat/completions", {
      method: "POST", headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" },
      body: JSON.stringify({ messages: ask, ...body }),
    });
    const j = await x.json();
    check(x.status === 400 && j.error && j.error.param === "tool_choice", `${what}: ${x.status} ${j.error && j.error.message}`);
  };
  await err({ tools, tool_choice: { type: "function", function: { name: "nope" } } }, "a named function not in tools");
  await err({ tool_choice: "required" }, "tool_choice required without tools");
  {
    // parameters the arguments cannot be held to: a 400 for a strict function, free arguments otherwise
    const loose = [{ type: "function", function: { ...tools[0].function,
      parameters: { type: "object", properties: { city: { type: "string", not: { const: "x" } } } } } }];
    const x = await fetch(base + "/v1/chat/completions", {
      method: "POST", headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" },
      body: JSON.stringify({ messages: ask, tool_choice: tc,
        tools: [{ type: "function", function: { ...loose[0].function, strict: true } }] }),
    });
    const j = await x.json();
    check(x.status === 400 && j.error.param === "tools" && /strict/.test(j.error.message) && /'not'/.test(j.error.message),
      `a strict function whose parameters use not: ${x.status} ${j.error && j.error.message}`);
    const l = await client.chat.completions.create({ model, messages: ask, tools: loose, tool_choice: tc, temperature: 0 });
    check(l.choices[0].message.tool_calls && l.choices[0].message.tool_calls[0].function.name === "get_weather",
      "the same function not strict: the call made, its arguments free");
  }
  console.log(failures ? `${failures} failed` : "all passed");
  process.exit(failures ? 1 : 0);
}

// ---- whole ----
const r = await client.chat.completions.create({ model, messages: ask, tools, tool_choice: "auto", temperature: 0 });
const msg = r.choices[0].message;
check(msg.reasoning_content === reasoning && msg.reasoning === reasoning,
  `reasoning apart from the answer: ${JSON.stringify(msg.reasoning_content)}`);
check(msg.content === null, `no answer text beside the call: content ${JSON.stringify(msg.content)}`);
const call = msg.tool_calls && msg.tool_calls[0];
check(msg.tool_calls && msg.tool_calls.length === 1 && call.type === "function" && call.function.name === "get_weather" &&
  typeof call.id === "string", `one tool call: ${JSON.stringify(msg.tool_calls)}`);
let args = null;
try { args = JSON.parse(call.function.arguments); } catch (e) { /* checked below */ }
check(args && args.city === "Paris" && args.unit === "celsius", `its arguments are JSON: ${call && call.function.arguments}`);
check(r.choices[0].finish_reason === "tool_calls", `finish_reason ${r.choices[0].finish_reason}`);
check(r.usage.completion_tokens_details.reasoning_tokens > 0 &&
  r.usage.completion_tokens_details.reasoning_tokens < r.usage.completion_tokens,
  `reasoning tokens ${r.usage.completion_tokens_details.reasoning_tokens} of ${r.usage.completion_tokens}`);

// ---- streamed: the deltas add up to the whole ----
{
  const { rs, content, finish, chunks, calls } = await streamed({});
  check(rs === reasoning && content === "", `streamed reasoning and answer equal the whole (${chunks} chunks)`);
  check(calls.length === 1 && calls[0].name === call.function.name && calls[0].arguments === call.function.arguments &&
    finish === "tool_calls", `streamed tool call equals the whole: ${JSON.stringify(calls)}`);
}

// ---- the round trip: the call and its result go back into the conversation ----
{
  const history = [...ask, msg, { role: "tool", tool_call_id: call.id, content: "18 degrees and sunny" }];
  const r2 = await client.chat.completions.create({ model, messages: history, tools, temperature: 0 });
  check(r2.choices[0].message.role === "assistant", "a conversation with the tool's result is answered");
  const t = await fetch(base + "/tokenize", {
    method: "POST", headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" },
    body: JSON.stringify({ messages: history, tools }),
  }).then((x) => x.json());
  const d = await fetch(base + "/detokenize", {
    method: "POST", headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" },
    body: JSON.stringify({ tokens: t.tokens }),
  }).then((x) => x.json());
  check(d.prompt.includes("get_weather") && d.prompt.includes("18 degrees and sunny") && d.prompt.includes("Paris"),
    "the rendered conversation holds the call and the tool's result");
}

// ---- the Responses API: reasoning and the call as output items, whole and streamed; the round trip ----
{
  const w = await client.responses.create({ model, input: "What is the weather in Paris?", tools: rtools,
    temperature: 0 });
  const sh = shape(w.output), f = w.output.find((o) => o.type === "function_call");
  check(sh.kinds === "reasoning,function_call" && sh.rs === reasoning && f.name === "get_weather" &&
    f.arguments === call.function.arguments && f.status === "completed" && w.status === "completed" &&
    w.usage.output_tokens_details.reasoning_tokens === r.usage.completion_tokens_details.reasoning_tokens,
  `responses: reasoning then the call, as chat's: ${JSON.stringify(sh)}`);
  const s2 = await responded({});
  check(JSON.stringify(shape(s2.fin.output)) === JSON.stringify(sh) && s2.rs === reasoning &&
    s2.args === f.arguments, "responses, streamed: the same items, their deltas adding up");
  // the call and its output go back as items: the conversation renders as chat's with the tool's result
  const items = [{ role: "user", content: "What is the weather in Paris?" }, ...w.output,
    { type: "function_call_output", call_id: f.call_id, output: "18 degrees and sunny" }];
  const w2 = await client.responses.create({ model, input: items, tools: rtools, temperature: 0 });
  const history = [...ask, { role: "assistant", content: null, tool_calls: [{ id: f.call_id, type: "function",
    function: { name: f.name, arguments: f.arguments } }] }, { role: "tool", tool_call_id: f.call_id,
    content: "18 degrees and sunny" }];
  const c2 = await client.chat.completions.create({ model, messages: history, tools, temperature: 0 });
  const t2 = shape(w2.output), m2 = c2.choices[0].message;
  const text2 = w2.output.filter((o) => o.type === "message").map((o) => o.content[0].text).join("");
  check(w2.usage.input_tokens === c2.usage.prompt_tokens && t2.rs === m2.reasoning_content && text2 === (m2.content || "") &&
    w2.status === (c2.choices[0].finish_reason === "length" ? "incomplete" : "completed"),
  `responses: the round trip's items render as chat's messages (${w2.usage.input_tokens} tokens both), the same answer`);
}

// ---- Anthropic's Messages API: thinking and tool_use blocks, whole and streamed; the round trip ----
{
  const w = await anthropic.messages.create({ model, max_tokens: 200, messages: askM, tools: mtools, temperature: 0 });
  const u = w.content.find((b) => b.type === "tool_use");
  check(blocks(w) === `thinking:${reasoning}|tool_use:get_weather:${JSON.stringify(args)}:true` &&
    w.stop_reason === "tool_use", `messages: thinking then the call, as chat's: ${blocks(w)}`);
  const s3 = await messaged({});
  check(blocks(s3.fin) === blocks(w) && s3.thinking === reasoning && JSON.stringify(JSON.parse(s3.json)) ===
    JSON.stringify(u.input) && s3.fin.usage.output_tokens === w.usage.output_tokens,
  "messages, streamed: the same blocks, their deltas adding up");
  // the assistant's blocks and a tool_result go back: rendered as chat renders the same messages
  const turn = [...askM, { role: "assistant", content: w.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: u.id, content: "18 degrees and sunny" }] }];
  const history = [...ask, { role: "assistant", content: null, reasoning_content: reasoning, tool_calls: [{ id: u.id,
    type: "function", function: { name: u.name, arguments: JSON.stringify(u.input) } }] },
  { role: "tool", tool_call_id: u.id, content: "18 degrees and sunny" }];
  const [n, c2] = await Promise.all([anthropic.messages.countTokens({ model, messages: turn, tools: mtools }),
    client.chat.completions.create({ model, messages: history, tools, temperature: 0, max_tokens: 8 })]);
  const w2 = await anthropic.messages.create({ model, max_tokens: 8, messages: turn, tools: mtools, temperature: 0 });
  check(n.input_tokens === c2.usage.prompt_tokens && w2.usage.input_tokens + w2.usage.cache_read_input_tokens ===
    c2.usage.prompt_tokens, `messages: the round trip's blocks render as chat's messages (${n.input_tokens} tokens)`);
}

// ---- tool_choice none: the tools are not offered ----
{
  const t = (tc) => fetch(base + "/tokenize", {
    method: "POST", headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" },
    body: JSON.stringify({ messages: ask, tools, tool_choice: tc }),
  }).then((x) => x.json());
  const [a, n] = await Promise.all([t("auto"), t("none")]);
  check(a.count > n.count, `tool_choice none leaves the tools out of the prompt (${a.count} vs ${n.count} tokens)`);
}

console.log(failures ? `${failures} failed` : "all passed");
process.exit(failures ? 1 : 0);
