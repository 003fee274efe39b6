// Keep-alive events on a stream that stays silent: against a server with
// --max-seqs 1 --sse-keepalive 0.01 (tests/e2e/serve.sh starts it), four
// long completions hold the only place in turn, and streams submitted
// behind them wait in the queue. Each must get keep-alives before its first token — an SSE
// comment on the OpenAI routes, Anthropic's ping event on /v1/messages —
// and then its whole answer, which the official clients read through them.
// node keepalive.mjs BASE_URL API_KEY; exits 1 on any failure.
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const [base, key] = process.argv.slice(2);
const model = "tiny";
let failures = 0;
const check = (cond, what) => { if (!cond) failures++; console.log((cond ? "ok   " : "FAIL ") + what); };
const headers = { Authorization: "Bearer " + key, "Content-Type": "application/json" };
const ask = [{ role: "user", content: "Hello there" }];

// the raw bytes of a stream, read to its end
async function raw(path, body) {
  const r = await fetch(base + path, { method: "POST", headers, body: JSON.stringify({ ...body, stream: true }) });
  return await r.text();
}
/* the long completions are in, one running and one queued at least,
 * however slowly they came on a busy machine: what follows queues behind
 * them (rather than after a fixed wait that a loaded machine outlasts) */
async function held() {
  for (let i = 0; i < 400; i++) {
    const text = await (await fetch(base + "/metrics", { headers })).text();
    const n = (name) => Number((text.split("\n").find((l) => l.startsWith("dsinfer:" + name + "{")) || " NaN").split(" ").pop());
    if (n("num_requests_running") >= 1 && n("num_requests_waiting") >= 1) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error("the long completions never showed in /metrics as running and queued");
}
const hold = () => Promise.all([0, 1, 2, 3].map(() => fetch(base + "/v1/chat/completions", { method: "POST", headers,
  body: JSON.stringify({ messages: ask, max_tokens: 480, ignore_eos: true, temperature: 0 }) }).then((r) => r.json())));

{
  const long = hold();
  await held(); /* they are queued first */
  const [chat, msg] = await Promise.all([raw("/v1/chat/completions", { messages: ask, max_tokens: 8, temperature: 0 }),
    raw("/v1/messages", { messages: ask, max_tokens: 8, temperature: 0 })]);
  await long;
  const firstData = chat.indexOf("data: "), ka = chat.indexOf(": keep-alive\n\n");
  check(ka >= 0 && ka < firstData && chat.trimEnd().endsWith("data: [DONE]"),
    `chat stream queued behind long completions: ${chat.split(": keep-alive").length - 1} keep-alives before its first chunk, then whole`);
  const ping = msg.indexOf("event: ping\ndata: {\"type\":\"ping\"}"), start = msg.indexOf("event: message_start");
  check(ping >= 0 && ping < start && msg.includes("event: message_stop"),
    `messages stream queued: ${msg.split("event: ping").length - 1} pings before message_start, then whole`);
}
{ // the clients read through them: the same answers as unqueued
  const client = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0 });
  const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
  const alone = await client.chat.completions.create({ model, messages: ask, max_tokens: 8, temperature: 0 });
  const long = hold();
  await held();
  const s = await client.chat.completions.create({ model, messages: ask, max_tokens: 8, temperature: 0, stream: true });
  const m = anthropic.messages.stream({ model, messages: ask, max_tokens: 8, temperature: 0 });
  let text = "";
  for await (const c of s) text += c.choices[0] && c.choices[0].delta.content ? c.choices[0].delta.content : "";
  const fin = await m.finalMessage();
  await long;
  const want = alone.choices[0].message.content;
  check(text === want && fin.content[0].text === want, `the clients read past them: ${JSON.stringify(text)}`);
}
console.log(failures ? `${failures} failed` : "all passed");
process.exit(failures ? 1 : 0);
