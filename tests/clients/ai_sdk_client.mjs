// Drives `shardcheck serve` with the Vercel AI SDK's OpenAI-compatible provider (`ai` and
// `@ai-sdk/openai-compatible`, pinned in package.json, installed by ci/setup.sh): its completion
// model (which always sends stop: ["\nuser:"]) and its chat model, whole (generateText) and
// streamed (streamText), with usage. tests/test_serve_client.c starts the server and runs it.
//
// usage: node tests/clients/ai_sdk_client.mjs BASE_URL API_KEY MODEL
// Prints one line per check; exits 0 when every check passed, 1 at the first that did not.
import { generateText, streamText } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { check } from "./check.mjs";

const [base, key, model] = process.argv.slice(2);
if (!base || !key || !model) {
  console.error("usage: node ai_sdk_client.mjs BASE_URL API_KEY MODEL");
  process.exit(2);
}


const provider = createOpenAICompatible({
  name: "shardcheck", baseURL: `${base}/v1`, apiKey: key, includeUsage: true,
});
// the server's own field: every answer its full length (sim answers otherwise end at EOS)
const providerOptions = { shardcheck: { ignore_eos: true } };

for (const [kind, m] of [["completion", provider.completionModel(model)],
                         ["chat", provider.chatModel(model)]]) {
  const whole = await generateText({ model: m, prompt: "Hello", maxOutputTokens: 6, providerOptions,
                                     maxRetries: 0 });
  check(typeof whole.text === "string" && whole.text.length > 0, `${kind}: generateText text`, whole.text);
  check(whole.finishReason === "length", `${kind}: generateText finishReason`, whole.finishReason);
  check(whole.usage.outputTokens === 6 && whole.usage.inputTokens > 0, `${kind}: generateText usage`,
        whole.usage);

  const s = streamText({ model: m, prompt: "Hello", maxOutputTokens: 5, providerOptions, maxRetries: 0,
                         onError: ({ error }) => check(false, `${kind}: streamText error`, String(error)) });
  let text = "", parts = 0;
  for await (const t of s.textStream) { text += t; parts++; }
  const finish = await s.finishReason, usage = await s.usage;
  check(parts > 0 && text.length > 0, `${kind}: streamText text`, { parts, text });
  check(finish === "length", `${kind}: streamText finishReason`, finish);
  check(usage.outputTokens === 5, `${kind}: streamText usage`, usage);
}

// the SDK's stop sequences reach the server: one that the answer holds ends it there
const all = await generateText({ model: provider.completionModel(model), prompt: "stop", maxOutputTokens: 12,
                                 providerOptions, maxRetries: 0 });
const words = all.text.split(" ").filter((w) => w.length > 0);
const stop = " " + words[Math.floor(words.length / 2)];
const cut = await generateText({ model: provider.completionModel(model), prompt: "stop", maxOutputTokens: 12,
                                 stopSequences: [stop], providerOptions, maxRetries: 0 });
check(cut.finishReason === "stop" && cut.text === all.text.slice(0, all.text.indexOf(stop)),
      "completion: stopSequences end the text at the first match", { all: all.text, stop, cut: cut.text });

console.log("ai_sdk_client: all checks passed");
