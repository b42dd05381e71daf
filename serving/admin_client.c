// The client of shardcheck serve's admin API (docs/serve.md, "Admin API"): a fault inside an
// engine (oom, corrupt, slow, and their clear) written as one item of a scenario's faults: list
// and POSTed to /admin/faults with the admin token. The HTTP replica sends its faults through it
// when its server is shardcheck serve.
// Not here: the signals a launched server takes (serving/replica_http.c, serving/launch.c), the
// server side (server/admin.c).
#include "serving/admin_client.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

// --- the body
char *admin_client_fault_body(const replica_fault *f) {
  char target[48];
  if (f->rank >= 0)
    snprintf(target, sizeof target, "replica0.rank%d", f->rank);
  else
    snprintf(target, sizeof target, "replica0");
  json_t *o = NULL;
  switch (f->kind) {
  case RFAULT_OOM:
    o = json_pack("{s:{s:s,s:i},s:s}", "oom", "mode", f->persistent ? "persistent" : "transient",
                  "after_allocs", f->after_allocs, "target", target);
    break;
  case RFAULT_CORRUPT:
    o = json_pack("{s:{s:s},s:s}", "corrupt", "kind", f->bitflip ? "bitflip" : "nan", "target",
                  target);
    break;
  case RFAULT_SLOW_RANK:
    o = json_pack("{s:{s:s,s:f},s:s}", "slow", "on", "rank", "factor", f->factor, "target",
                  target);
    break;
  case RFAULT_SLOW_LINK: {
    json_t *s = json_pack("{s:s}", "on", "link");
    if (s && f->factor > 1) json_object_set_new(s, "factor", json_real(f->factor));
    if (s && f->latency_ns) {
      char lat[32];
      snprintf(lat, sizeof lat, "%lluns", (unsigned long long)f->latency_ns);
      json_object_set_new(s, "latency", json_string(lat));
    }
    if (s && f->bandwidth > 0) json_object_set_new(s, "bandwidth", json_real(f->bandwidth));
    o = s ? json_pack("{s:o,s:s}", "slow", s, "target", "replica0") : NULL;
    break;
  }
  case RFAULT_CLEAR: o = json_pack("{s:b,s:s}", "clear", 1, "target", "replica0"); break;
  default: return NULL;
  }
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return text;
}

// --- the request
static size_t admin_answer(char *p, size_t sz, size_t n, void *ud) {
  char *buf = ud; // 512 bytes, NUL-terminated: the start of the answer is enough
  size_t have = strlen(buf), k = sz * n, take = k < 511 - have ? k : 511 - have;
  memcpy(buf + have, p, take);
  buf[have + take] = 0;
  return k;
}

sc_status admin_client_post(const char *url, const char *token, const char *body, sc_error *err) {
  CURL *e = curl_easy_init();
  char auth[192], answer[512] = "";
  snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
  struct curl_slist *hl2 = hl ? curl_slist_append(hl, auth) : NULL;
  if (!e || !hl2) {
    curl_easy_cleanup(e);
    curl_slist_free_all(hl);
    return sc_fail(err, SC_OOM, "out of memory sending a fault to %s", url);
  }
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl2);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, admin_answer);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)answer);
  CURLcode rc = curl_easy_perform(e);
  long status = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(e);
  curl_slist_free_all(hl2);
  if (rc != CURLE_OK)
    return sc_fail(err, SC_IO, "%s: %s", url, curl_easy_strerror(rc));
  if (status != 200)
    return sc_fail(err, status == 409 ? SC_ABORTED : SC_INVALID, "%s answered %ld: %.300s",
                   url, status, answer);
  return SC_OK;
}
