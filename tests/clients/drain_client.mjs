// One stream through the official `openai` npm package while `shardcheck serve` drains: prints
// "streaming" once chunks arrive (tests/test_serve_client.c then sends the server SIGTERM), and
// expects the stream to end as a drain cut-off ends it: the error event, which the client
// raises as an APIError, after [DONE] and the chunked terminator arrived whole (a connection
// cut short raises TypeError: terminated instead).
//
// usage: node tests/clients/drain_client.mjs BASE_URL MODEL
// Exits 0 when the stream ended with the server's error event, 1 otherwise.
import OpenAI from "openai";

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0, timeout: 60000 });
const stream = await client.completions.create({
  model, prompt: "a long one", max_tokens: 4000, ignore_eos: true, stream: true,
});
let got = 0;
try {
  for await (const ch of stream) {
    got += ch.choices.length;
    if (got === 2) console.log("streaming");
  }
  console.error(`FAIL: the stream ended without the error event after ${got} chunks`);
  process.exit(1);
} catch (e) {
  if (e instanceof OpenAI.APIError && /drain timeout|shutting down/.test(e.message)) {
    console.log(`ok: the drain's error event after ${got} chunks: ${e.message}`);
    process.exit(0);
  }
  console.error(`FAIL: ${e.name}: ${e.message} after ${got} chunks`);
  process.exit(1);
}
