// Drives `shardcheck serve` with the official `openai` npm package (pinned in package.json,
// installed by ci/setup.sh into node_modules here): completions and chat, whole and streamed,
// usage, an aborted stream after which /metrics shows the KV cache back to zero, and a 401 for
// a wrong key. tests/test_serve_client.c starts the server and runs this file.
//
// usage: node tests/clients/openai_client.mjs BASE_URL API_KEY
//   BASE_URL: http://127.0.0.1:PORT (the server's root, without /v1)
// Prints one line per check; exits 0 when every check passed, 1 at the first that did not.
import OpenAI from "openai";
import { check } from "./check.mjs";

const [base, key] = process.argv.slice(2);
if (!base || !key) {
  console.error("usage: node openai_client.mjs BASE_URL API_KEY");
  process.exit(2);
}


const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });

// The served model, as the client lists it.
const models = await client.models.list();
const model = models.data[0]?.id;
check(typeof model === "string" && model.length > 0, "models.list names the served model", models.data);

// --- completions
const c = await client.completions.create({
  model, prompt: "Hello", max_tokens: 8, ignore_eos: true,
});
check(c.object === "text_completion" && c.id.startsWith("cmpl-"), "completion object and id", c);
check(typeof c.choices[0].text === "string", "completion text", c.choices[0]);
check(c.choices[0].finish_reason === "length", "completion finish_reason", c.choices[0]);
check(c.usage.completion_tokens === 8 && c.usage.total_tokens === c.usage.prompt_tokens + 8,
      "completion usage", c.usage);

let text = "", chunks = 0, finish = null, usage = null;
const cs = await client.completions.create({
  model, prompt: "Hello", max_tokens: 6, ignore_eos: true, stream: true,
  stream_options: { include_usage: true },
});
for await (const ch of cs) {
  check(ch.object === "text_completion", "stream chunk object", ch);
  if (ch.choices.length) {
    text += ch.choices[0].text;
    chunks++;
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  if (ch.usage) usage = ch.usage;
}
check(chunks === 6 && finish === "length", "completion stream: 6 chunks, then length", { chunks, finish });
check(usage && usage.completion_tokens === 6, "completion stream usage", usage);

// --- chat
const m = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Hi" }], max_tokens: 5, ignore_eos: true,
});
check(m.object === "chat.completion" && m.choices[0].message.role === "assistant",
      "chat completion message", m);
check(typeof m.choices[0].message.content === "string", "chat content", m.choices[0].message);
check(m.usage.completion_tokens === 5, "chat usage", m.usage);

let role = null, content = "", n = 0, cfinish = null, cusage = null;
const ms = await client.chat.completions.create({
  model, messages: [{ role: "system", content: "be brief" }, { role: "user", content: "Hi" }],
  max_tokens: 5, ignore_eos: true, stream: true, stream_options: { include_usage: true },
});
for await (const ch of ms) {
  check(ch.object === "chat.completion.chunk", "chat chunk object", ch);
  if (!ch.choices.length) {
    cusage = ch.usage;
    continue;
  }
  const d = ch.choices[0].delta;
  if (d.role) role = d.role;
  if (d.content) { content += d.content; }
  if (d.content !== undefined && ch.choices[0].token_ids?.length) n++;
  if (ch.choices[0].finish_reason) cfinish = ch.choices[0].finish_reason;
}
check(role === "assistant" && n === 5 && cfinish === "length", "chat stream: role, 5 tokens, length",
      { role, n, cfinish });
check(cusage && cusage.completion_tokens === 5 && cusage.prompt_tokens > 0, "chat stream usage", cusage);

// --- an aborted stream: the server frees its KV blocks
async function metric(prefix) {
  const r = await fetch(`${base}/metrics`);
  const t = await r.text();
  let sum = 0, seen = false;
  for (const line of t.split("\n"))
    if (line.startsWith(prefix)) { sum += Number(line.slice(line.lastIndexOf(" ") + 1)); seen = true; }
  if (!seen) throw new Error(`no ${prefix} in /metrics`);
  return sum;
}

const ac = new AbortController();
const long = await client.completions.create(
  { model, prompt: "a long one", max_tokens: 4000, ignore_eos: true, stream: true },
  { signal: ac.signal });
let got = 0, aborted = false, busy = 0;
try {
  for await (const ch of long) {
    got += ch.choices.length;
    if (got === 3) {
      busy = await metric("shardcheck:kv_blocks_used");
      ac.abort();
    }
  }
  aborted = ac.signal.aborted && got < 4000; // the client ends the iteration quietly
} catch (e) {
  aborted = e instanceof OpenAI.APIUserAbortError || e.name === "AbortError";
  if (!aborted) throw e;
}
check(aborted && got >= 3, "the stream was aborted by AbortController", { got, aborted });
check(busy > 0, "while it streamed, KV blocks were in use", busy);
// (the gauges can show the blocks free a step before the cancel's event is counted)
let kv = -1, running = -1, aborts = 0;
for (let i = 0; i < 500; i++) {
  kv = await metric("shardcheck:kv_blocks_used");
  running = await metric("vllm:num_requests_running");
  aborts = await metric("vllm:request_success_total{finished_reason=\"abort\"");
  if (kv === 0 && running === 0 && aborts >= 1) break;
  await new Promise((r) => setTimeout(r, 10));
}
check(kv === 0 && running === 0, "after the abort, /metrics shows the KV cache back to zero", { kv, running });
check(aborts >= 1, "the abort is counted as finished_reason abort", aborts);

// --- a wrong key: 401, as the client's AuthenticationError
const wrong = new OpenAI({ baseURL: `${base}/v1`, apiKey: key + "x", maxRetries: 0 });
let status = 0, isAuth = false;
try {
  await wrong.completions.create({ model, prompt: "x", max_tokens: 1 });
} catch (e) {
  status = e.status;
  isAuth = e instanceof OpenAI.AuthenticationError;
}
check(status === 401 && isAuth, "a wrong key is a 401 AuthenticationError", { status, isAuth });

console.log("openai_client: all checks passed");
