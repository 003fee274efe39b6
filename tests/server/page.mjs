// The chat page in headless Chromium (puppeteer-core, Debian's chromium):
// node page.mjs BASE_URL API_KEY MODE
//   MODE chat:      send a message, see the answer stream in; a long answer
//                   stopped with the Stop button; a second turn after it
//   MODE reasoning: the server's model reasons first (a scripted server,
//                   tests/unit/test_server.c): the reasoning shows apart
// Exits 1 on any failure, 77 when there is no Chromium to run.
import fs from "node:fs";
import http from "node:http";
import puppeteer from "puppeteer-core";

const [server, key, mode] = process.argv.slice(2);
const exe = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"].find((p) => fs.existsSync(p));
if (!exe) {
  console.log("no chromium found");
  process.exit(77);
}
// The page talks to the server through this proxy. While `pace` is set it
// hands the browser one server-sent event every 25 ms, so a long answer is
// still streaming when the test clicks Stop however fast the server is; the
// browser's abort closes the proxy's upstream request as a client's would.
// Each request's body is read whole and sent on a connection of its own
// (no kept-alive socket to race with the server's closing it); what goes
// wrong is printed.
let pace = false;
const proxy = http.createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = Buffer.concat(chunks);
  const paced = pace;
  const up = http.request(server + req.url, { method: req.method, headers: req.headers, agent: false }, (ur) => {
    res.writeHead(ur.statusCode, ur.headers);
    if (!paced || !/event-stream/.test(ur.headers["content-type"] || "")) return ur.pipe(res);
    let buf = "", ended = false;
    const queue = [];
    const timer = setInterval(() => {
      if (queue.length) res.write(queue.shift());
      else if (ended) { clearInterval(timer); res.end(); }
    }, 25);
    ur.setEncoding("utf8");
    ur.on("data", (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) { queue.push(buf.slice(0, i + 2)); buf = buf.slice(i + 2); }
    });
    ur.on("end", () => { if (buf) queue.push(buf); ended = true; });
    res.on("close", () => {
      clearInterval(timer);
      if (!res.writableFinished) up.destroy(); /* the browser went away: so does the request */
    });
  });
  up.on("error", (e) => {
    if (!res.writableFinished) console.log(`proxy: ${req.method} ${req.url}: ${e.message}`);
    res.destroy();
  });
  up.end(body);
});
await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
const base = `http://127.0.0.1:${proxy.address().port}`;

let failures = 0;
const ok = (what) => console.log("ok   " + what);
const fail = (what) => { failures++; console.log("FAIL " + what); };
const check = (cond, what) => (cond ? ok(what) : fail(what));

const browser = await puppeteer.launch({
  executablePath: exe, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(base + "/", { waitUntil: "load" });
  check((await page.title()) === "dsinfer", "the page loads");
  await page.type("#key", key);
  await page.keyboard.press("Tab"); /* the key's change event: the page asks for the model again */
  await page.waitForFunction(() => document.querySelector("#model").textContent.length > 0, { timeout: 60000 });
  const answers = () => page.$$eval(".assistant .answer", (els) => els.map((e) => e.textContent));
  // what each answer showed: the random-weight model may sample <think> at any
  // point, and the rest of its text then streams into the reasoning
  const said = () => page.$$eval(".assistant", (els) => els.map((e) =>
    [".answer", "details.reasoning > div"].map((s) => (e.querySelector(s) || {}).textContent || "").join("")));
  // the n-th answer is over (its stats line is written last)
  const done = (n) => page.waitForFunction((k) => {
    const els = document.querySelectorAll(".assistant .stats");
    return els.length >= k && els[k - 1].textContent.length > 0 && !document.querySelector("#send").disabled;
  }, { timeout: 60000 }, n);

  if (mode === "reasoning") {
    await page.type("#input", "What is the weather in Paris?");
    await page.click("#send");
    await done(1);
    const r = await page.$eval(".assistant details.reasoning", (d) => ({ hidden: d.hidden, text: d.textContent }));
    check(!r.hidden && r.text.includes("I should call the tool"), `reasoning shown apart: ${JSON.stringify(r.text)}`);
  } else {
    // the random-weight model may sample its end token at any point: these answers must run their length
    await page.setRequestInterception(true);
    page.on("request", (req) => {
      if (req.method() === "POST" && req.url().endsWith("/v1/chat/completions"))
        req.continue({ postData: JSON.stringify({ ...JSON.parse(req.postData()), ignore_eos: true }) });
      else req.continue();
    });
    // a message, streamed in
    await page.$eval("#max_tokens", (e) => { e.value = "32"; });
    await page.type("#input", "Hello there");
    await page.keyboard.press("Enter");
    await done(1);
    const a = await answers();
    const stats = await page.$eval(".assistant .stats", (e) => e.textContent);
    const err = await page.$$eval(".assistant .error", (els) => els.map((e) => e.textContent).join("; "));
    /* the random-weight model may sample <think> first: then its text streams into the reasoning */
    const why = await page.$$eval(".assistant details.reasoning > div", (els) => els.map((e) => e.textContent).join(""));
    check(a.length === 1 && (a[0].length > 0 || why.length > 0) && /tokens/.test(stats) && !err,
      `an answer streamed in: ${JSON.stringify(a[0])}${why ? ", reasoning " + JSON.stringify(why) : ""} (${stats}${err ? "; " + err : ""})`);
    check((await page.$$eval(".msg.user", (els) => els.length)) === 1, "the message shows as the user's");

    // a long answer, paced: Stop ends it
    pace = true;
    await page.$eval("#max_tokens", (e) => { e.value = "200"; });
    await page.type("#input", "Tell me a long story");
    await page.click("#send");
    await page.waitForFunction(() => {
      const els = document.querySelectorAll(".assistant");
      if (els.length !== 2) return false;
      const shown = (sel) => { const e = els[1].querySelector(sel); return e ? e.textContent.length : 0; };
      return shown(".answer") + shown("details.reasoning > div") > 0;
    }, { timeout: 60000 });
    check(!(await page.$eval("#stop", (b) => b.disabled)), "Stop is enabled while an answer streams");
    await page.click("#stop");
    await done(2);
    const stopped = await page.$$eval(".assistant .stats", (els) => els[1].textContent);
    check(/stopped/.test(stopped), `Stop ends the answer: ${stopped}`);
    pace = false;

    // and the conversation goes on
    await page.$eval("#max_tokens", (e) => { e.value = "16"; });
    await page.type("#input", "Thanks");
    await page.click("#send");
    await done(3);
    const b = await said();
    check(b.length === 3 && b[2].length > 0, `a third turn after the stop: ${JSON.stringify(b[2])}`);
  }
  check(errors.length === 0, `no script errors${errors.length ? ": " + errors.join("; ") : ""}`);
} finally {
  await browser.close();
  proxy.close();
}
console.log(failures ? `${failures} failed` : "all passed");
process.exit(failures ? 1 : 0);
