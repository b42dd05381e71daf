// The server's loop thread (see server.h): the one thread that touches the replicas and the
// router. It builds the replicas, then loops: run the HTTP side's commands (submit, cancel,
// closures), send the router's retries, step simulated replicas to their priced deadlines,
// pull events and turn them into response bytes and metrics, then sleep in ppoll on its wake
// eventfd, the replicas' wait fds and hup_ep, an epoll set of the generations' sockets,
// edge-triggered on a hang-up (a hang-up cancels the request at once). Connections with new
// bytes are resumed in bursts (flush_resumes).
//
// Sim mode: each replica's virtual clock reads the monotonic time since the server started. A
// step that ends at virtual time t is completed at exactly t (the loop sleeps to t, and the next
// step starts at t however late the loop woke), so scheduling errors do not accumulate. Ending a
// step comes before handing out another's chunks (drain_events checks between small batches),
// and the loop thread asks the kernel for a short scheduling slice (0.1 ms), so that it runs
// soon after its deadline on a busy machine.
//
// Parsing and formatting are server/openai.c's; the connections, server/http.c's.
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "server/server_impl.h"

static const uint64_t TICK_NS = 500000000ull;  // gauges refresh at least this often
static const uint64_t SWEEP_NS = 50000000ull;  // connections past the request timeout close
static const uint64_t TRIM_NS = 1000000000ull;  // an idle server trims its heap at most this often
// SIM_EV_BATCH: events handed out between checks for a step that fell due (about 50 us);
// RESUME_BURST: connections with new bytes resumed together
enum { EV_BATCH = 256, SIM_EV_BATCH = 16, RESUME_BURST = 64, TABLE_RECYCLE = 512 };

static uint64_t rel_now(const server *s) { return sc_monotonic_ns() - s->t0; }

static uint64_t sim_mix(uint64_t x) { // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t sim_clock_now(void *ctx) { return *(const uint64_t *)ctx; }

void server_wake(server *s) {
  uint64_t one = 1;
  ssize_t w = write(s->wake_fd, &one, sizeof one);
  (void)w; // a full counter already wakes the loop
}

// Queues c for the loop and wakes it; false (c freed) once the server has stopped.
static bool enqueue(server *s, server_cmd *c) {
  pthread_mutex_lock(&s->mu);
  bool ok = !s->stopped;
  if (ok) {
    if (s->cmd_tail)
      s->cmd_tail->next = c;
    else
      s->cmd_head = c;
    s->cmd_tail = c;
  }
  pthread_mutex_unlock(&s->mu);
  if (!ok) {
    free(c);
    return false;
  }
  server_wake(s);
  return true;
}

bool server_post(server *s, void (*fn)(server *, void *), void (*drop)(server *, void *),
                 void *ud) {
  server_cmd *c = calloc(1, sizeof *c);
  if (!c) return false;
  *c = (server_cmd){.fn = fn, .drop = drop, .ud = ud};
  return enqueue(s, c);
}

bool server_loop_call(server *s, void (*fn)(server *s, void *ud), void *ud) {
  bool ran = false;
  server_cmd *c = calloc(1, sizeof *c);
  if (!c) return false;
  *c = (server_cmd){.fn = fn, .ud = ud, .ran = &ran};
  if (!enqueue(s, c)) return false;
  pthread_mutex_lock(&s->mu);
  while (!ran && !s->stopped) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  return ran;
}

replica *server_replica(server *s, int i) { return i >= 0 && i < s->n_reps ? s->reps[i] : NULL; }
int server_n_replicas(const server *s) { return s->n_reps; }

// --- output: bytes for a connection (mu taken here)
// Appends text (owned, may be NULL: out of memory) to g's output and wakes its connection.
// done: nothing more will follow (status: a non-streamed body's HTTP status).
static void emit_bytes(server *s, gen *g, const char *text, size_t n, bool done, int status) {
  pthread_mutex_lock(&s->mu);
  if (text && !g->gone && !g->hung_up) {
    if (g->len + n + 1 > g->cap) { // out stays NUL-terminated (a whole body is sent as a string)
      size_t cap = g->cap ? g->cap : 256;
      while (cap < g->len + n + 1) cap *= 2;
      char *p = realloc(g->out, cap);
      if (p) {
        g->out = p;
        g->cap = cap;
      }
    }
    if (g->len + n + 1 <= g->cap) {
      memcpy(g->out + g->len, text, n + 1);
      g->len += n;
    }
  }
  if (done) {
    g->done = true;
    g->status = status;
  }
  if (g->suspended && g->conn && !g->resume_queued) {
    if (s->n_resume == s->cap_resume) {
      size_t cap = s->cap_resume ? s->cap_resume * 2 : 256;
      gen **p = realloc(s->resume, cap * sizeof *p);
      if (p) {
        s->resume = p;
        s->cap_resume = cap;
      }
    }
    if (s->n_resume < s->cap_resume) { // resumed in a burst by flush_resumes
      gen_ref(g);
      g->resume_queued = true;
      s->resume[s->n_resume++] = g;
    } else {
      g->suspended = false;
      MHD_resume_connection(g->conn);
    }
  }
  pthread_mutex_unlock(&s->mu);
}

// Resumes the connections emit_bytes queued. One burst wakes libmicrohttpd's thread once and
// finds it awake for the rest, where a resume per chunk woke it per chunk.
static void flush_resumes(server *s) {
  size_t n = s->n_resume;
  if (!n) return;
  for (size_t i = 0; i < n; i++) {
    gen *g = s->resume[i];
    pthread_mutex_lock(&s->mu);
    g->resume_queued = false;
    if (g->suspended && g->conn) {
      g->suspended = false;
      MHD_resume_connection(g->conn);
    }
    pthread_mutex_unlock(&s->mu);
  }
  s->n_resume = 0;
  for (size_t i = 0; i < n; i++) gen_unref(s->resume[i]);
}

static void emit(server *s, gen *g, char *text, bool done, int status) {
  emit_bytes(s, g, text, text ? strlen(text) : 0, done, status);
  free(text);
}

static char *copy_str(const char *t) { return strdup(t); }

// --- the request table
// Room in by_key for one more row than the table has (the table grows itself).
static bool grow_by_key(server *s) {
  if (s->reqs.n < s->cap_by_key) return true;
  size_t cap = s->cap_by_key ? s->cap_by_key * 2 : 1024;
  gen **b = realloc(s->by_key, cap * sizeof *b);
  if (!b) return false;
  s->by_key = b;
  s->cap_by_key = cap;
  return true;
}

// Once nothing is in flight or waiting for a retry, the table starts again from row 0, so a
// long-lived server does not grow with every request it ever served.
static void maybe_recycle(server *s) {
  if (s->reqs.inflight || s->reqs.n < TABLE_RECYCLE) return;
  router_tick(s->rt, rel_now(s)); // drops finished rows from its retry queue
  if (router_next(s->rt) != UINT64_MAX) return;
  req_table_clear(&s->reqs);
}

static const char *finish_name(engine_finish_reason r) {
  return r == FINISH_STOP ? "stop" : "length"; // vLLM says length at the context's end too
}

// A finished request's histograms, as vLLM observes them at its finish (mu held). Its phases
// need the time its replica first scheduled it; without it (a worker process's replica does
// not report it) only the end-to-end and token figures are observed.
static void observe_finished(server *s, const gen *g, const req_rec *q, uint64_t end) {
  srv_metrics *m = &s->m;
  double e2e = (double)(end - g->arrival_ns) * 1e-9;
  srv_observe(m, SRV_H_E2E, e2e);
  srv_observe(m, SRV_H_PROMPT_TOKENS, g->req.n_prompt);
  srv_observe(m, SRV_H_GEN_TOKENS, q->n_tok);
  if (!g->first_ns) return;
  uint64_t last = g->last_ns > g->first_ns ? g->last_ns : g->first_ns;
  double decode = (double)(last - g->first_ns) * 1e-9;
  srv_observe(m, SRV_H_DECODE, decode);
  if (q->n_tok > 1) srv_observe(m, SRV_H_REQ_TPOT, decode / (q->n_tok - 1));
  if (!g->sched_ns) return;
  uint64_t sched = g->sched_ns < g->arrival_ns ? g->arrival_ns : g->sched_ns;
  if (sched > g->first_ns) sched = g->first_ns;
  srv_observe(m, SRV_H_QUEUE, (double)(sched - g->arrival_ns) * 1e-9);
  srv_observe(m, SRV_H_PREFILL, (double)(g->first_ns - sched) * 1e-9);
  srv_observe(m, SRV_H_INFERENCE, (double)(last - sched) * 1e-9);
}

// The end of a finished generation's output: a stream's finish chunk (unless its last token's
// carried it), usage chunk and [DONE]; or the whole body.
static void emit_end(server *s, gen *g, const req_rec *q, const char *finish) {
  g->output_done = true;
  if (g->req.stream) {
    if (!g->final_sent) emit(s, g, oai_sse_content(&g->resp, "", NULL, 0, finish), false, 0);
    if (g->req.include_usage)
      emit(s, g, oai_sse_usage(&g->resp, g->req.n_prompt, q->n_tok), false, 0);
    emit(s, g, copy_str("data: [DONE]\n\n"), true, 200);
  } else {
    emit(s, g,
         oai_body(&g->resp, g->text ? g->text : "", q->ids, q->n_tok, finish, g->req.n_prompt),
         true, 200);
  }
}

// Ends generation k: a normal finish (finish != NULL), or an error (status, msg). Closes the
// stream or completes the body; updates the metrics.
static void finish_gen(server *s, uint64_t k, const char *finish, int status, const char *msg,
                       req_status st) {
  req_rec *q = &s->reqs.v[k];
  gen *g = s->by_key[k];
  if (!router_end(s->rt, k, st)) return;
  s->by_key[k] = NULL;
  if (!g) return;
  // metrics first: a client that has its answer sees them counted
  uint64_t now = sc_monotonic_ns();
  pthread_mutex_lock(&s->mu);
  // still open (libmicrohttpd closes a socket only after its completion, which takes mu): the
  // descriptor is this generation's, not a later connection's that reused the number
  if (g->watched && g->conn) epoll_ctl(s->hup_ep, EPOLL_CTL_DEL, g->fd, NULL);
  g->watched = false;
  s->inflight--;
  if (!g->first_ns) s->waiting--;
  if (st == REQ_OK) {
    int kind = !strcmp(finish, "stop") ? 0 : 1;
    s->m.success[kind]++;
    s->m.prompt_tokens += (uint64_t)g->req.n_prompt;
    uint64_t end = g->end_ns ? g->end_ns : now; // a stop the server found: when it sent it
    observe_finished(s, g, q, end);
  } else if (st == REQ_CANCELLED) {
    s->m.success[2]++; // vLLM counts an aborted request as finished_reason "abort"
    s->m.cancelled++;
  } else {
    s->m.failed++;
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  // output
  if (g->output_done) {
    // sent already (a stop the server found)
  } else if (finish) {
    emit_end(s, g, q, finish);
  } else if (g->req.stream) {
    emit(s, g, oai_sse_error(status, msg), false, 0);
    emit(s, g, copy_str("data: [DONE]\n\n"), true, 200);
  } else {
    emit(s, g, oai_error_body(status, "", msg), true, status);
  }
  // the row's token arrays served the response and resumes: nothing reads them now, and kept
  // until the table recycles they pin the heap's pages (RSS climbs with every burst)
  free(q->tok);
  free(q->ids);
  q->tok = NULL;
  q->ids = NULL;
  q->n_tok = q->cap_tok = 0;
  // the loop's reference
  g->live = false;
  if (g->prev)
    g->prev->next = g->next;
  else
    s->live = g->next;
  if (g->next) g->next->prev = g->prev;
  g->prev = g->next = NULL;
  gen_unref(g);
}

// --- router hooks
// Whether the engine ends rq at its EOS itself. min_tokens: EOS may not end the request before
// it, so in real mode the loop ends it at an EOS past it; a simulated answer's EOS falls past
// min_tokens already (gen.sim_len).
static bool eos_stops_engine(const server *s, const oai_request *rq) {
  return !rq->ignore_eos && (rq->min_tokens == 0 || s->sim);
}

// Sends generation k to a replica (router_send): its prompt, continued by the tokens the client
// already has on a resume. False when no replica can take it (nothing changed).
static bool dispatch(void *ud, uint64_t k, uint64_t t) {
  server *s = ud;
  const gen *g = s->by_key[k];
  const oai_request *rq = &g->req;
  engine_request er = {.prompt = rq->prompt,
                       .n_prompt = rq->n_prompt,
                       .max_tokens = rq->max_tokens,
                       .sampling = {.temperature = (float)rq->temperature,
                                    .top_p = (float)rq->top_p,
                                    .seed = rq->seed},
                       .stop_at_eos = eos_stops_engine(s, rq),
                       .sim_key = g->sim_key,
                       .sim_len = g->sim_len};
  int sent = s->reqs.v[k].n_tok;
  if (sent > 0 && er.sim_key) { // a resume: the rest of the answer, drawn on from where it was
    er.sim_key = sim_mix(er.sim_key + (uint64_t)sent) | 1;
    er.sim_len = g->sim_len > sent ? g->sim_len - sent : g->sim_len ? 1 : 0;
  }
  sc_error e = {{0}};
  switch (router_send(s->rt, k, &er, t, &e)) {
  case ROUTER_NONE: return false;
  case ROUTER_SEND_OOM:
    finish_gen(s, k, NULL, 500, "out of memory resuming the request", REQ_FAILED);
    break;
  case ROUTER_REFUSED:
    finish_gen(s, k, NULL, 500, e.msg[0] ? e.msg : "the replica refused the request", REQ_FAILED);
    break;
  case ROUTER_SENT: break;
  }
  return true;
}

static void fail_hook(void *ud, uint64_t k, const char *reason, const char *error, uint64_t t) {
  (void)t;
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s", reason, error ? error : "");
  finish_gen(ud, k, NULL, 500, msg, REQ_FAILED);
}

// --- commands from the HTTP side
void server_loop_submit(server *s, void *ud) {
  gen *g = ud; // the command's reference becomes the loop's
  pthread_mutex_lock(&s->mu);
  bool gone = g->gone;
  pthread_mutex_unlock(&s->mu);
  uint64_t k = 0;
  req_rec row = {.arrival = g->arrival_ns - s->t0,
                 .prompt_tokens = g->req.n_prompt,
                 .max_tokens = g->req.max_tokens,
                 .replica = -1,
                 .user = -1,
                 .fault = -1,
                 .state = REQ_INFLIGHT};
  if (gone || !grow_by_key(s) || !req_table_add(&s->reqs, &row, &k)) {
    pthread_mutex_lock(&s->mu);
    s->inflight--;
    s->waiting--;
    pthread_mutex_unlock(&s->mu);
    emit(s, g, gone ? NULL : oai_error_body(500, "", "out of memory"), true, 500);
    gen_unref(g);
    return;
  }
  s->by_key[k] = g;
  g->key = k;
  g->live = true;
  g->next = s->live;
  if (s->live) s->live->prev = g;
  s->live = g;
  g->serial = ++s->next_serial;
  pthread_mutex_lock(&s->mu);
  if (g->conn && g->fd >= 0) { // a hang-up from now on cancels it (watch_hangups)
    struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLET,
                             .data.u64 = (uint64_t)g->serial << 32 | (uint32_t)k};
    g->watched = epoll_ctl(s->hup_ep, EPOLL_CTL_ADD, g->fd, &ev) == 0 ||
                 (errno == EEXIST && epoll_ctl(s->hup_ep, EPOLL_CTL_MOD, g->fd, &ev) == 0);
  }
  pthread_mutex_unlock(&s->mu);
  uint64_t t = rel_now(s);
  if (!dispatch(s, k, t) && !router_hold(s->rt, k, t)) {
    pthread_mutex_lock(&s->mu);
    s->m.rejected++; // a refusal like any 503 before the request ran
    pthread_mutex_unlock(&s->mu);
    finish_gen(s, k, NULL, 503, "no healthy replica to send the request to", REQ_FAILED);
  }
}

// The client went away: its request ends now (its KV blocks are freed before the next step).
static void cancel_gen(server *s, gen *g) {
  if (!g->live || g->cancelling) return;
  req_rec *q = &s->reqs.v[g->key];
  if (!q->dispatched || q->waiting) {
    finish_gen(s, g->key, NULL, 499, "cancelled", REQ_CANCELLED);
    return;
  }
  g->cancelling = true;
  replica_cancel(s->reps[q->replica], g->key);
}

void server_loop_cancel(server *s, void *ud) {
  gen *g = ud;
  cancel_gen(s, g);
  gen_unref(g);
}

// Runs the queued commands (outside mu).
static void run_commands(server *s) {
  pthread_mutex_lock(&s->mu);
  server_cmd *c = s->cmd_head;
  s->cmd_head = s->cmd_tail = NULL;
  pthread_mutex_unlock(&s->mu);
  while (c) {
    server_cmd *next = c->next;
    c->fn(s, c->ud);
    if (c->ran) {
      pthread_mutex_lock(&s->mu);
      *c->ran = true;
      pthread_cond_broadcast(&s->cv);
      pthread_mutex_unlock(&s->mu);
    }
    free(c);
    c = next;
  }
}

// --- events
// Appends n bytes of t to g's text (NUL-terminated); out of memory: the text goes unkept.
static void text_append(gen *g, const char *t, size_t n) {
  if (g->text_len + n + 1 > g->text_cap) {
    size_t cap = g->text_cap ? g->text_cap * 2 : 256;
    while (cap < g->text_len + n + 1) cap *= 2;
    char *p = realloc(g->text, cap);
    if (!p) return;
    g->text = p;
    g->text_cap = cap;
  }
  memcpy(g->text + g->text_len, t, n);
  g->text_len += n;
  g->text[g->text_len] = 0;
}

// The earliest stop string in g's text that ends at or after byte `from` (the text before it
// was searched already); its start in *at. NULL: none.
static const char *find_stop(const gen *g, size_t from, size_t *at) {
  const oai_request *rq = &g->req;
  const char *hit = NULL;
  size_t lo = from + 1 > rq->max_stop_len ? from + 1 - rq->max_stop_len : 0;
  for (int i = 0; g->text && i < rq->n_stop; i++) {
    const char *p = strstr(g->text + lo, rq->stop[i]);
    if (p && (!hit || (size_t)(p - g->text) < *at)) {
      hit = rq->stop[i];
      *at = (size_t)(p - g->text);
    }
  }
  return hit;
}

static bool is_stop_id(const oai_request *rq, int32_t id) {
  for (int i = 0; i < rq->n_stop_ids; i++)
    if (rq->stop_ids[i] == id) return true;
  return false;
}

// One content chunk of a stream: `text` for the token ids ids[0..n).
static void emit_chunk(server *s, gen *g, const char *text, const int32_t *ids, int n,
                       const char *finish) {
  if (!g->sse_head) g->sse_head = oai_sse_head(&g->resp);
  char chunk[1024];
  size_t k = g->sse_head ? oai_sse_content_to(g->sse_head, g->req.kind, text, ids, n, finish, chunk,
                                              sizeof chunk)
                         : 0;
  if (k)
    emit_bytes(s, g, chunk, k, false, 0);
  else
    emit(s, g, oai_sse_content(&g->resp, text, ids, n, finish), false, 0);
  g->final_sent = finish != NULL;
}

static void on_token(server *s, gen *g, req_rec *q, const replica_event *ev) {
  const oai_request *rq = &g->req;
  (void)req_add_token(q, ev->token, rel_now(s)); // out of memory: the token goes out unkept
  int idx = q->n_tok - 1;
  uint64_t now = sc_monotonic_ns();
  bool first = !g->first_ns;
  pthread_mutex_lock(&s->mu);
  if (first) {
    g->first_ns = now;
    s->waiting--;
    srv_observe(&s->m, SRV_H_TTFT, (double)(now - g->arrival_ns) * 1e-9);
    // when its replica scheduled it, on the replica's clock (sim: ns since t0)
    if (ev->sched_ns) g->sched_ns = s->sim ? s->t0 + ev->sched_ns : ev->sched_ns;
  } else {
    double itl = (double)(now - g->last_ns) * 1e-9;
    srv_observe(&s->m, SRV_H_ITL, itl);
    srv_observe(&s->m, SRV_H_TPOT, itl);
  }
  g->last_ns = now;
  s->m.generation_tokens++;
  pthread_mutex_unlock(&s->mu);
  const model_config *m = s->lim.model;
  bool eos = !rq->ignore_eos && ev->token == m->eos_token_id;
  // vLLM checks EOS, stop token ids and stop strings only past min_tokens
  bool stop_id = idx >= rq->min_tokens && is_stop_id(rq, ev->token);
  const char *finish = NULL;
  if ((eos || stop_id) && idx >= rq->min_tokens)
    finish = "stop";
  else if (q->n_tok >= rq->max_tokens)
    finish = "length";
  else if (rq->n_prompt + q->n_tok >= m->max_seq_len)
    finish = "length";
  char text[64];
  oai_token_text(m, s->c.synthetic_text, ev->token, text, sizeof text);
  if (stop_id) text[0] = 0; // a stop token's text is not sent (EOS prints nothing anyway)
  // the engine stops by itself at its EOS and its length; past min_tokens at an EOS, at a stop
  // token or a stop string it goes on, and the server ends the request
  bool ours = stop_id || (eos && idx >= rq->min_tokens && !eos_stops_engine(s, rq));
  const char *piece = text; // what this token's chunk carries
  if (rq->n_stop || !rq->stream) {
    size_t before = g->text_len;
    text_append(g, text, strlen(text));
    size_t at = 0;
    if (rq->n_stop && !stop_id && idx >= rq->min_tokens && find_stop(g, before, &at)) {
      size_t keep = at;
      if (rq->include_stop_str) {
        const char *hit = find_stop(g, before, &at);
        keep = at + strlen(hit);
      }
      if (g->text) g->text[keep] = 0;
      g->text_len = keep < g->text_len ? keep : g->text_len;
      finish = "stop";
      ours = true;
    }
    if (rq->stream) { // release what no stop string can still claim
      size_t hold = rq->include_stop_str || finish || !rq->max_stop_len ? 0 : rq->max_stop_len - 1;
      size_t upto = g->text_len > hold ? g->text_len - hold : 0;
      if (upto < g->sent) upto = g->sent;
      piece = g->text ? g->text + g->sent : "";
      char saved = g->text ? g->text[upto] : 0;
      if (g->text) g->text[upto] = 0;
      if (first && rq->kind == OAI_CHAT) emit(s, g, oai_sse_role(&g->resp), false, 0);
      emit_chunk(s, g, piece, &ev->token, 1, finish);
      if (g->text) g->text[upto] = saved;
      g->sent = upto;
      piece = NULL;
    }
  }
  if (rq->stream && piece) {
    // chat: the role chunk goes out with the first token, as vLLM's first engine output carries
    // it (chat_completion_stream_generator), so a client's TTFT is the engine's
    if (first && rq->kind == OAI_CHAT) emit(s, g, oai_sse_role(&g->resp), false, 0);
    emit_chunk(s, g, piece, &ev->token, 1, finish);
  }
  if (finish) snprintf(g->finish, sizeof g->finish, "%s", finish);
  if (ours) { // the client has its answer now; the cancel's FINISHED event ends the row
    emit_end(s, g, q, finish);
    g->end_ns = now;
    g->cancelling = true;
    replica_cancel(s->reps[q->replica], g->key);
  }
}

static void on_event(server *s, int rep, const replica_event *ev) {
  if (ev->kind == REPLICA_EV_STEP) {
    int tokens = ev->step.prefill_tokens + ev->step.decode_tokens;
    if (tokens > 0) {
      pthread_mutex_lock(&s->mu);
      srv_observe(&s->m, SRV_H_ITERATION, tokens);
      pthread_mutex_unlock(&s->mu);
    }
    return;
  }
  if (ev->key >= s->reqs.n) return;
  req_rec *q = &s->reqs.v[ev->key];
  gen *g = s->by_key[ev->key];
  if (q->state == REQ_DONE || !g || q->replica != rep || q->waiting) return; // stale
  switch (ev->kind) {
  case REPLICA_EV_TOKEN:
    if (!g->cancelling) on_token(s, g, q, ev);
    break;
  case REPLICA_EV_FINISHED:
    if (ev->reason == FINISH_CANCELLED)
      finish_gen(s, ev->key, g->finish[0] ? g->finish : NULL, 499, "cancelled",
                 g->finish[0] ? REQ_OK : REQ_CANCELLED);
    else
      finish_gen(s, ev->key, g->finish[0] ? g->finish : finish_name(ev->reason), 200, NULL, REQ_OK);
    break;
  case REPLICA_EV_FAILED:
    if (replica_failure_is_loss(ev->failure) && !g->cancelling) {
      q->loss_seen = true;
      router_on_lost(s->rt, ev->key, rep, rel_now(s));
      break;
    }
    {
      char msg[300];
      snprintf(msg, sizeof msg, "%s: %s", replica_failure_name(ev->failure),
               ev->status == SC_INVALID ? "the engine refused the request"
                                        : replica_error(s->reps[rep]));
      finish_gen(s, ev->key, NULL, ev->status == SC_INVALID ? 400 : 500, msg, REQ_FAILED);
    }
    break;
  default: break;
  }
}

// Pulls and handles every pending event; true when there were any.
static bool sim_end_due(server *s, uint64_t wall);

// Hands out the replicas' events. In sim mode a step that falls due meanwhile ends first, at
// its priced time: a step's end does not wait for another step's chunks to go out.
static bool drain_events(server *s) {
  replica_event ev[EV_BATCH];
  bool any = false;
  for (int i = 0; i < s->n_reps; i++) {
    if (router_busy(s->rt, i)) continue; // the supervisor owns it
    for (;;) {
      int n = replica_poll(s->reps[i], ev, s->sim ? SIM_EV_BATCH : EV_BATCH);
      if (n <= 0) break;
      any = true;
      s->n_events += (uint64_t)n;
      for (int k = 0; k < n; k++) on_event(s, i, &ev[k]);
      if (s->n_resume >= RESUME_BURST) flush_resumes(s);
      if (s->sim) sim_end_due(s, rel_now(s));
    }
    flush_resumes(s);
    if (s->sim && s->step_end[i]) { // replica i's ended steps are all out
      uint64_t out = rel_now(s);
      pthread_mutex_lock(&s->mu);
      srv_hist_add(&s->m.handout, srv_late_bounds, SRV_LATE_BUCKETS,
                   (double)(out - s->step_end[i]) * 1e-9);
      pthread_mutex_unlock(&s->mu);
      s->step_end[i] = 0;
    }
  }
  return any;
}

// Sim: ends every step due by wall time `wall` (ns since t0), each at its own priced end, the
// earliest first, without handing out their events; true when any ended.
static bool sim_end_due(server *s, uint64_t wall) {
  bool any = false;
  for (int guard = 0; guard < 1000000; guard++) {
    uint64_t t = UINT64_MAX;
    for (int i = 0; i < s->n_reps; i++) {
      uint64_t n = replica_next_ns(s->reps[i]);
      if (n < t) t = n;
    }
    if (t > wall) break;
    if (t > s->vnow) s->vnow = t;
    bool stepped = false;
    for (int i = 0; i < s->n_reps; i++) {
      if (replica_next_ns(s->reps[i]) > s->vnow || !replica_advance(s->reps[i], s->vnow)) continue;
      // its step is over (its tokens exist): how late after its priced end
      uint64_t ended = rel_now(s);
      stepped = true;
      if (!s->step_end[i]) s->step_end[i] = ended | 1; // 0 means none
      pthread_mutex_lock(&s->mu);
      srv_hist_add(&s->m.late, srv_late_bounds, SRV_LATE_BUCKETS,
                   ended > t ? (double)(ended - t) * 1e-9 : 0);
      pthread_mutex_unlock(&s->mu);
    }
    if (stepped) {
      any = true;
    } else {
      // nothing came of it: the replicas wait on the clock, which is now `wall`
      if (s->vnow >= wall) break;
      s->vnow = wall;
    }
  }
  return any;
}

// Sim: ends every step due by wall time `wall` at its own end time and hands out the events.
static void sim_catch_up(server *s, uint64_t wall) {
  for (int guard = 0; guard < 1000000; guard++) {
    bool ended = sim_end_due(s, wall);
    if (!drain_events(s) && !ended) break;
  }
  if (wall > s->vnow) s->vnow = wall;
}

// Copies the replicas' gauges for /metrics.
static void refresh_gauges(server *s) {
  srv_replica_gauges g[64];
  int n = s->n_reps < 64 ? s->n_reps : 64;
  pthread_mutex_lock(&s->mu);
  if (s->m.reps) memcpy(g, s->m.reps, (size_t)n * sizeof *g);
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < n; i++) {
    if (router_busy(s->rt, i)) { // restarting: untouchable, and dead until it is back
      g[i].health = REPLICA_DEAD;
      g[i].kv_used = g[i].running = g[i].waiting = 0;
      continue;
    }
    engine_stats st;
    replica_stats(s->reps[i], &st);
    g[i] = (srv_replica_gauges){.kv_used = st.kv_used,
                                .kv_total = st.kv_total,
                                .running = st.running,
                                .waiting = st.queue_len,
                                .preemptions = st.preemptions,
                                .prefix_queries = st.prefix_query_tokens,
                                .prefix_hits = st.prefix_hit_tokens,
                                .epoch = replica_epoch(s->reps[i]),
                                .health = replica_health_get(s->reps[i])};
  }
  pthread_mutex_lock(&s->mu);
  if (s->m.reps) memcpy(s->m.reps, g, (size_t)n * sizeof *g);
  pthread_mutex_unlock(&s->mu);
}

// Ends every live generation with an error (drain timeout, stop).
static int cut_off(server *s, const char *why) {
  int n = 0;
  while (s->live) {
    gen *g = s->live;
    req_rec *q = &s->reqs.v[g->key];
    if (q->dispatched && !q->waiting && !g->cancelling && !router_busy(s->rt, q->replica))
      replica_cancel(s->reps[q->replica], g->key);
    finish_gen(s, g->key, NULL, 503, why, REQ_CANCELLED);
    n++;
  }
  return n;
}

// --- building the replicas
// The supervisor's notice that a restart ended.
static void wake_loop(void *ud) { server_wake(ud); }

static sc_status build(server *s, sc_error *err) {
  engine_config ec = s->c.engine;
  s->sim = s->c.replicas.kind == REPLICA_SIM;
  ec.clock = s->sim ? (sc_clock){.now_ns = sim_clock_now, .ctx = &s->vnow} : sc_clock_monotonic();
  s->reps = calloc((size_t)s->c.dp, sizeof *s->reps);
  s->rs = calloc((size_t)s->c.dp, sizeof *s->rs);
  s->step_end = calloc((size_t)s->c.dp, sizeof *s->step_end);
  if (!s->reps || !s->rs || !s->step_end) return sc_fail(err, SC_OOM, "out of memory");
  router_config rc = {.policy = s->c.policy,
                      .max_retries = s->c.max_retries,
                      .backoff_ns = 50000000ull,
                      .resume = true};
  router_hooks rh = {.ud = s, .dispatch = dispatch, .fail = fail_hook};
  s->rt = router_new(&rc, s->reps, s->c.dp, &s->reqs, rh);
  if (!s->rt) return sc_fail(err, SC_OOM, "out of memory");
  for (int i = 0; i < s->c.dp; i++) {
    ec.sim.layout.first_gpu = i * ec.tp * ec.pp;
    ec.first_device = i * ec.tp * ec.pp;
    SC_TRY(replica_new(&s->c.replicas, &ec, i, &s->reps[i], err));
    s->n_reps++;
  }
  replica_set_peers(s->reps, s->n_reps);
  if (!s->sim && s->c.restart && s->n_reps > 0 && replica_can_restart(s->reps[0]) &&
      sup_new(s->reps, s->n_reps, wake_loop, s, &s->sup) != SC_OK)
    return SC_OOM;
  return SC_OK;
}

// --- dead replicas: restarts
// A replica's requests not yet ended when it is found dead (every one normally got its FAILED
// event first): they go to the router as lost ones, before anyone else may touch the replica.
static void lose_leftovers(server *s, int i) {
  size_t n = 0;
  for (gen *g = s->live; g; g = g->next) n++;
  uint64_t *keys = n ? malloc(n * sizeof *keys) : NULL;
  size_t k = 0;
  for (gen *g = s->live; g && keys; g = g->next) {
    req_rec *q = &s->reqs.v[g->key];
    if (q->state != REQ_DONE && q->dispatched && !q->waiting && q->replica == i) keys[k++] = g->key;
  }
  for (size_t j = 0; j < k; j++) {
    req_rec *q = &s->reqs.v[keys[j]];
    gen *g = s->by_key[keys[j]];
    if (q->state == REQ_DONE || !g) continue;
    if (g->cancelling)
      finish_gen(s, keys[j], g->finish[0] ? g->finish : NULL, 499, "cancelled",
                 g->finish[0] ? REQ_OK : REQ_CANCELLED);
    else
      router_on_lost(s->rt, keys[j], i, rel_now(s));
  }
  free(keys);
}

static void restart_done(server *s, int i, sc_status st, const sc_error *e) {
  srv_restart *r = &s->rs[i];
  s->n_events++; // the gauges show it now
  r->last_ms = (double)(sc_monotonic_ns() - r->began_ns) / 1e6;
  if (st == SC_OK) {
    r->restarts++;
    snprintf(r->note, sizeof r->note, "restarted (epoch %d) in %.0f ms",
             replica_epoch(s->reps[i]), r->last_ms);
  } else {
    r->given_up = true;
    snprintf(r->note, sizeof r->note, "could not be restarted: %.200s",
             e->msg[0] ? e->msg : sc_status_name(st));
  }
}

// Finds dead replicas and restarts them: in sim mode at once (the replica models its load
// time, admitting once it is over); in real mode through the supervisor, the router holding
// the replica busy meanwhile so that nothing on this thread touches it. A replica that cannot
// restart (a local one) or whose restart failed stays dead.
static void watch_replicas(server *s) {
  for (int i = 0; i < s->n_reps; i++) {
    srv_restart *r = &s->rs[i];
    if (r->restarting) {
      sc_status st;
      sc_error e;
      if (!sup_done(s->sup, i, &st, &e)) continue;
      r->restarting = false;
      router_set_busy(s->rt, i, false);
      restart_done(s, i, st, &e);
      continue;
    }
    if (r->given_up || replica_health_get(s->reps[i]) != REPLICA_DEAD) continue;
    lose_leftovers(s, i);
    if (!s->c.restart || !replica_can_restart(s->reps[i])) {
      r->given_up = true;
      snprintf(r->note, sizeof r->note, "dead for good: %s",
               s->c.restart ? "this kind of replica cannot restart" : "restarts are off");
      continue;
    }
    r->began_ns = sc_monotonic_ns();
    if (replica_in_virtual_time(s->reps[i])) {
      sc_error e = {{0}};
      sc_status st = replica_restart(s->reps[i], &e);
      restart_done(s, i, st, &e);
      continue;
    }
    if (!s->sup) {
      r->given_up = true;
      snprintf(r->note, sizeof r->note, "dead for good: no supervisor");
      continue;
    }
    r->restarting = true;
    router_set_busy(s->rt, i, true);
    sup_ask(s->sup, i, NULL);
  }
}

// The clients that hung up: a suspended connection is closed and its request cancelled now
// (its KV blocks are free before the next step); one libmicrohttpd is serving closes at its
// next suspension (peer_hup), its completion cancelling the request.
static void watch_hangups(server *s) {
  struct epoll_event ev[256];
  int n;
  do {
    n = epoll_wait(s->hup_ep, ev, 256, 0);
    for (int i = 0; i < n; i++) {
      uint64_t k = (uint32_t)ev[i].data.u64;
      gen *g = k < s->reqs.n ? s->by_key[k] : NULL;
      if (!g || g->serial != (uint32_t)(ev[i].data.u64 >> 32)) continue; // over already
      pthread_mutex_lock(&s->mu);
      bool now = g->suspended && g->conn;
      if (now) { // close it: nothing more is sent
        g->hung_up = true;
        g->suspended = false;
        MHD_resume_connection(g->conn);
      } else {
        g->peer_hup = true;
      }
      pthread_mutex_unlock(&s->mu);
      if (now) cancel_gen(s, g);
    }
  } while (n == 256);
}

// Sim mode: a short scheduling slice (0.1 ms, EEVDF's sched_attr.sched_runtime for a normal
// thread; no privilege needed) lets the loop thread preempt the HTTP thread or a client sooner
// when it wakes for a step's end. A kernel without it keeps its default: nothing else changes.
static void ask_short_slice(void) {
  struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t prio;
    uint64_t runtime, deadline, period;
  } a = {.size = 48, .policy = 0 /* SCHED_OTHER */, .runtime = 100000};
  (void)syscall(SYS_sched_setattr, 0, &a, 0);
}

// --- the loop
void *server_loop_main(void *arg) {
  server *s = arg;
  pthread_setname_np(pthread_self(), "serve-loop"); // as top -H and perf show it
  sc_error err = {{0}};
  sc_status st = build(s, &err);
  if (s->sim) ask_short_slice();
  int kv_blocks = 0, block = 0;
  if (st == SC_OK) {
    engine_stats es;
    replica_stats(s->reps[0], &es);
    kv_blocks = es.kv_total;
    block = es.kv_block_size ? es.kv_block_size : s->c.engine.block_size;
  }
  pthread_mutex_lock(&s->mu);
  s->build_status = st;
  s->build_err = err;
  if (st == SC_OK) {
    s->ready = true;
    s->kv_blocks = kv_blocks;
    s->lim.kv_tokens = kv_blocks * block;
  } else {
    s->failed = true;
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (st == SC_OK) refresh_gauges(s);

  struct pollfd *fds = calloc(2 + (size_t)s->c.dp, sizeof *fds);
  uint64_t next_tick = 0, next_sweep = 0, seen_events = 0, next_trim = 0, trimmed_at = 0;
  bool stop = st != SC_OK || !fds;
  while (!stop) {
    uint64_t wall = rel_now(s);
    if (s->sim) sim_catch_up(s, wall);
    run_commands(s);
    router_tick(s->rt, wall);
    if (s->sim) sim_catch_up(s, rel_now(s)); // new work starts now
    drain_events(s);
    watch_replicas(s);
    bool events = s->n_events != seen_events; // also those handled while catching up (sim)
    seen_events = s->n_events;
    pthread_mutex_lock(&s->mu);
    bool stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (stopping) break;
    maybe_recycle(s);
    wall = rel_now(s);
    if (events || wall >= next_tick) {
      refresh_gauges(s);
      next_tick = wall + TICK_NS;
    }
    if (wall >= next_sweep) {
      server_http_sweep(s);
      next_sweep = wall + SWEEP_NS;
    }
    if (!s->live && wall >= next_trim) {
      // idle after work (no generation, no request in progress, something ended since the last
      // time): hand the allocator's free pages back (a burst of thousands of streams leaves them
      // spread over the heaps of this thread and libmicrohttpd's), so RSS follows the load
      pthread_mutex_lock(&s->conn_mu);
      uint64_t work = s->n_events + s->conns_closed;
      bool idle = s->n_requests == 0;
      pthread_mutex_unlock(&s->conn_mu);
      if (idle && work != trimmed_at) {
        malloc_trim(0);
        trimmed_at = work;
        next_trim = wall + TRIM_NS;
      }
    }
    flush_resumes(s); // what commands and restarts emitted
    // what to sleep on: the wake fd, the clients' hang-ups, the replicas
    size_t n = 0;
    fds[n++] = (struct pollfd){.fd = s->wake_fd, .events = POLLIN};
    fds[n++] = (struct pollfd){.fd = s->hup_ep, .events = POLLIN};
    for (int i = 0; i < s->n_reps; i++) {
      if (router_busy(s->rt, i)) continue; // the supervisor wakes the loop when it is done
      int fd = replica_wait_fd(s->reps[i]);
      if (fd < 0) continue;
      fds[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
    }
    uint64_t until = next_tick < next_sweep ? next_tick : next_sweep;
    uint64_t r = router_next(s->rt);
    if (r < until) until = r;
    uint64_t step_due = UINT64_MAX;
    for (int i = 0; s->sim && i < s->n_reps; i++) {
      uint64_t t = replica_next_ns(s->reps[i]);
      if (t < step_due) step_due = t;
    }
    if (step_due < until) until = step_due;
    wall = rel_now(s);
    uint64_t d = until > wall ? until - wall : 0;
    struct timespec ts = {.tv_sec = (time_t)(d / 1000000000ull),
                          .tv_nsec = (long)(d % 1000000000ull)};
    int got = ppoll(fds, (nfds_t)n, &ts, NULL);
    if (got > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      ssize_t rd = read(s->wake_fd, &v, sizeof v);
      (void)rd;
    }
    if (got > 0 && (fds[1].revents & POLLIN)) watch_hangups(s);
  }
  free(fds);
  // stopping: end what is left, then let no connection suspend again
  if (st == SC_OK) {
    run_commands(s);
    cut_off(s, "the server is shutting down");
    drain_events(s);
    flush_resumes(s);
  }
  pthread_mutex_lock(&s->mu);
  s->stopped = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

// Drain: the caller's thread waits for the loop's generations to end.
static void cut_cmd(server *s, void *ud) {
  *(int *)ud = cut_off(s, "the server is shutting down: the drain timeout passed");
}

int server_drain(server *s, uint64_t timeout_ns) {
  pthread_mutex_lock(&s->mu);
  s->draining = true;
  pthread_mutex_unlock(&s->mu);
  server_wake(s);
  uint64_t end = sc_monotonic_ns() + timeout_ns;
  pthread_mutex_lock(&s->mu);
  while (s->inflight > 0 && !s->stopped) {
    uint64_t now = sc_monotonic_ns();
    if (now >= end) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t wait = end - now < 100000000ull ? end - now : 100000000ull;
    ts.tv_nsec += (long)(wait % 1000000000ull);
    ts.tv_sec += (time_t)(wait / 1000000000ull) + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  int left = s->inflight;
  pthread_mutex_unlock(&s->mu);
  int cut = 0;
  if (left > 0 && !server_loop_call(s, cut_cmd, &cut)) cut = left;
  return cut;
}
