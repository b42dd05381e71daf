// The one check the npm client scripts share (openai_client.mjs, ai_sdk_client.mjs): prints
// "ok: WHAT", or "FAIL: WHAT: DETAIL" and exits 1 (the C test reads both).
export function check(ok, what, detail) {
  if (!ok) {
    console.error(`FAIL: ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}
