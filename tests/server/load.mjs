// A bounded load test: 16 streaming clients for SECONDS against `dsinfer serve`
// (tests/e2e/serve.sh starts it): node load.mjs BASE_URL API_KEY SECONDS
// Every request must complete with a finish_reason and no error, and at the
// end nothing may be running or waiting and no KV block held.
import OpenAI from "openai";

const [base, key, secs] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0, timeout: 300000 });
const words = ["river", "stone", "light", "north", "garden", "number", "engine", "winter", "paper", "signal"];
const deadline = Date.now() + Number(secs) * 1000;
let requests = 0, tokens = 0, errors = 0, unfinished = 0;
let seed = 12345;
const rand = (n) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };

async function worker(w) {
  while (Date.now() < deadline) {
    const prompt = Array.from({ length: 3 + rand(20) }, () => words[rand(words.length)]).join(" ");
    try {
      const stream = await client.chat.completions.create({
        model: "tiny", messages: [{ role: "user", content: `${w}: ${prompt}` }], max_tokens: 4 + rand(44),
        temperature: rand(2) ? 0 : 0.8, stream: true, stream_options: { include_usage: true },
      });
      let finish = null, usage = null;
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) if (c.finish_reason) finish = c.finish_reason;
      }
      requests++;
      if (!finish || !usage) unfinished++;
      else tokens += usage.completion_tokens;
    } catch (e) {
      errors++;
      console.log(`worker ${w}: ${e.status || ""} ${e.message}`);
    }
  }
}

async function metric(name) {
  const text = await (await fetch(base + "/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith("dsinfer:" + name + "{"));
  return line ? Number(line.split(" ").pop()) : NaN;
}

const t0 = Date.now();
await Promise.all(Array.from({ length: 16 }, (_, w) => worker(w)));
const wall = (Date.now() - t0) / 1000;
let running = NaN, waiting = NaN, kv = NaN;
for (let i = 0; i < 100; i++) {
  [running, waiting, kv] = await Promise.all([metric("num_requests_running"), metric("num_requests_waiting"),
    metric("kv_cache_usage_perc")]);
  if (running === 0 && waiting === 0 && kv === 0) break;
  await new Promise((r) => setTimeout(r, 50));
}
console.log(`load: ${requests} requests, ${tokens} tokens in ${wall.toFixed(1)} s (${(tokens / wall).toFixed(1)} tok/s), ` +
  `${errors} errors, ${unfinished} without an end; after: running ${running}, waiting ${waiting}, KV held ${kv}`);
const pass = requests > 16 && errors === 0 && unfinished === 0 && running === 0 && waiting === 0 && kv === 0;
console.log(pass ? "ok   load" : "FAIL load");
process.exit(pass ? 0 : 1);
