#!/usr/bin/env python3
"""A stand-in OpenAI-compatible server for shardcheck's HTTP replica tests (tests/test_http.c).

Streams vLLM-shaped server-sent events at known times: the first content chunk TTFT ms after the
request, then one chunk every TOKEN ms, the last with finish_reason "length", then the usage
chunk and "data: [DONE]". It listens on 127.0.0.1 only, over HTTP/1.1 with chunked bodies and
keep-alive. --mode picks a misbehaviour:
  normal       as above
  malformed    one good chunk, then an event whose data is not JSON
  error        two content chunks, then vLLM's mid-stream {"error": ...} payload and [DONE]
  never-ready  /health answers 503 forever
  exit         prints a line to stderr and exits 3 at once (a launch command that fails)
  removed-flag prints argparse's one-line usage (long, as vLLM's is) and its error for a flag the
               server no longer takes, and exits 2
--token-ids sends each chunk's token_ids (as vLLM does with return_token_ids) with two tokens
per chunk; --chunk-tokens N without --token-ids packs N tokens into each chunk and leaves their
count to the usage chunk. --pid-file writes "PID PGID" once listening; --child starts a sleeping
child in the same process group (as vLLM's workers are), to check a stop reaches the group.

The text of each token is a word drawn from the prompt, its position and --weights W, so two
stand-ins started with different weights answer the same prompt differently (text only, as
llama.cpp's server streams it, unless --token-ids). --slots N serves N requests at a time (the
others wait, "deferred"); each slot keeps its last prompt's cells once its request ends, as
llama.cpp's prompt cache does, until POST /slots/ID?action=erase (taken only with
--slot-save-path, as llama-server does; GET /props gives total_slots). --metrics picks /metrics:
  llamacpp     llamacpp:requests_processing, requests_deferred, and with --kv-metric the older
               builds' kv_cache_usage_ratio (cells in use, the slots' cache included, / --ctx)
  vllm         vllm:num_requests_running, num_requests_waiting, kv_cache_usage_perc (cached
               cells count as free)
  vllm-cache   as vllm, with vLLM V1's prefix-cache counters (engine-labelled, as vLLM writes
               them): vllm:prefix_cache_queries_total grows by each prompt's tokens, and
               vllm:prefix_cache_hits_total by its longest common prefix with an earlier prompt
  vllm-cache-bad  as vllm-cache with a hits sample that is not a number
  sglang-cache SGLang's names: num_running_reqs, num_queue_reqs, token_usage and its
               cache_hit_rate gauge (the hits over the queries so far)
  none         404, as llama-server without --metrics
  malformed    200 with text that is not the exposition format
--leak-cells N keeps N cells of every request that ends for good (a leak no erase frees).
--exit-after S exits (status 1) S seconds after it started listening: a server lost on its own.
--model NAME is taken and ignored (a hot swap's relaunch names its new model).
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()
STATE = {"running": 0, "waiting": 0, "cells": 0, "leaked": 0, "slot_cells": {},
         "pc_queries": 0, "pc_hits": 0}
PROMPTS = []  # the prompts seen, for the prefix-cache counters
SLOTS = None  # threading.Semaphore(--slots)


def word(prompt_key, pos):
    # a deterministic word for this prompt, position and weights
    h = (prompt_key * 1000003 + pos * 7919 + ARGS.weights * 104729) & 0xFFFFFFFF
    return " w%d" % (h % 9973)


def metrics_text():
    with LOCK:
        run, wait = STATE["running"], STATE["waiting"]
        used = STATE["cells"] + STATE["leaked"] + sum(STATE["slot_cells"].values())
    if ARGS.metrics == "malformed":
        return "this is { not the exposition format\n\x00\x01 ==\n"
    if ARGS.metrics.startswith("vllm"):
        out = ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running %d\n"
               "vllm:num_requests_waiting %d\nvllm:kv_cache_usage_perc %g\n"
               % (run, wait, (STATE["cells"] + STATE["leaked"]) / float(ARGS.ctx)))
        if ARGS.metrics != "vllm":
            lbl = '{engine="0",model_name="standin"}'
            hits = "NaN" if ARGS.metrics == "vllm-cache-bad" else "%.1f" % STATE["pc_hits"]
            out += ("# TYPE vllm:prefix_cache_queries_total counter\n"
                    "vllm:prefix_cache_queries_total%s %.1f\n"
                    "vllm:prefix_cache_queries_created%s 1.79e+09\n"
                    "# TYPE vllm:prefix_cache_hits_total counter\n"
                    "vllm:prefix_cache_hits_total%s %s\n"
                    % (lbl, STATE["pc_queries"], lbl, lbl, hits))
        return out
    if ARGS.metrics == "sglang-cache":
        q = STATE["pc_queries"]
        return ('sglang:num_running_reqs{model_name="standin"} %d\n'
                'sglang:num_queue_reqs{model_name="standin"} %d\n'
                'sglang:token_usage{model_name="standin"} %g\n'
                '# TYPE sglang:cache_hit_rate gauge\n'
                'sglang:cache_hit_rate{model_name="standin"} %g\n'
                % (run, wait, STATE["cells"] / float(ARGS.ctx),
                   STATE["pc_hits"] / float(q) if q else 0.0))
    out = ("# HELP llamacpp:requests_processing Number of requests processing.\n"
           "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing %d\n"
           "llamacpp:requests_deferred %d\nllamacpp:n_decode_total 1\n" % (run, wait))
    if ARGS.kv_metric:
        out += "llamacpp:kv_cache_usage_ratio %g\n" % (used / float(ARGS.ctx))
    return out


def chunk_json(obj):
    # vLLM's completion chunks are pydantic model_dump_json: compact separators
    return json.dumps(obj, separators=(",", ":"))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("standin: " + (fmt % args) + "\n")

    def send_chunk(self, data):
        b = data.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
        self.wfile.flush()

    def event(self, payload):
        self.send_chunk("data: " + payload + "\n\n")

    def reply(self, code, body, ctype="application/json"):
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        if self.path == "/health" and ARGS.mode != "never-ready":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/metrics" and ARGS.metrics != "none":
            self.reply(200, metrics_text(), "text/plain; version=0.0.4")
            return
        if self.path == "/props":
            self.reply(200, json.dumps({"total_slots": ARGS.slots}))
            return
        self.send_response(503 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        if self.path.startswith("/slots/"):  # llama-server's slot actions
            if not ARGS.slot_save_path:
                self.reply(501, json.dumps({"error": {"code": 501, "type": "not_supported_error",
                    "message": "This server does not support slots action. Start it with "
                               "`--slot-save-path`"}}))
                return
            sid = int(self.path[len("/slots/"):].split("?")[0])
            with LOCK:
                STATE["slot_cells"].pop(sid, None)
            self.reply(200, json.dumps({"id_slot": sid, "n_erased": 1}))
            return
        req = json.loads(raw or b"{}")
        chat = self.path.endswith("/chat/completions")
        if not (chat or self.path.endswith("/completions")):
            body = b'{"error":{"message":"not found","type":"NotFoundError","param":null,"code":404}}'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        max_tokens = int(req.get("max_tokens", 16))
        prompt = req.get("prompt") if not chat else req["messages"][0]["content"].split()
        n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        prompt_key = zlib.crc32(json.dumps(prompt).encode())  # the same in every process
        toks = prompt if isinstance(prompt, list) else str(prompt).split()
        with LOCK:
            STATE["waiting"] += 1
            lcp = 0
            for seen in PROMPTS:
                k = 0
                while k < min(len(seen), len(toks)) and seen[k] == toks[k]:
                    k += 1
                lcp = max(lcp, k)
            STATE["pc_queries"] += len(toks)
            STATE["pc_hits"] += lcp
            PROMPTS.append(list(toks))
        SLOTS.acquire()
        with LOCK:
            STATE["waiting"] -= 1
            STATE["running"] += 1
            slot = min(set(range(ARGS.slots)) - set(STATE.get("busy", set())))
            STATE.setdefault("busy", set()).add(slot)
            STATE["slot_cells"].pop(slot, None)
            STATE["cells"] += n_prompt
        try:
            self.stream(req, chat, max_tokens, prompt_key, n_prompt)
        finally:
            with LOCK:
                STATE["running"] -= 1
                STATE["busy"].discard(slot)
                STATE["cells"] -= n_prompt
                STATE["slot_cells"][slot] = n_prompt + max_tokens  # the prompt cache keeps it
                STATE["leaked"] += ARGS.leak_cells
            SLOTS.release()

    def stream(self, req, chat, max_tokens, prompt_key, n_prompt):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        created = int(time.time())
        rid = ("chatcmpl-" if chat else "cmpl-") + "%032x" % (id(self) & 0xFFFFFFFF)
        head = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created, "model": req.get("model", "")}

        def choice(text, finish, ids):
            if chat:
                c = {"index": 0, "delta": {"content": text}, "logprobs": None,
                     "finish_reason": finish}
            else:
                c = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                     "stop_reason": None}
            if ids is not None:
                c["token_ids"] = ids
            return dict(head, choices=[c])

        if chat:  # vLLM's role chunk: no content yet
            self.event(chunk_json(dict(head, choices=[{
                "index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                "finish_reason": None}])))
        per = 2 if ARGS.token_ids else max(1, ARGS.chunk_tokens)
        time.sleep(ARGS.ttft_ms / 1000.0)
        sent = 0
        k = 0
        while sent < max_tokens:
            m = min(per, max_tokens - sent)
            sent += m
            last = sent >= max_tokens
            ids = list(range(100 + sent - m, 100 + sent)) if ARGS.token_ids else None
            if ARGS.mode == "malformed" and k == 1:
                self.event("{not json")
                break
            if ARGS.mode == "error" and k == 2:
                self.event(json.dumps({"error": {"message": "Internal server error",
                                                 "type": "InternalServerError", "param": None,
                                                 "code": 500}}))
                break
            text = "".join(word(prompt_key, sent - m + i) for i in range(m))
            self.event(chunk_json(choice(text, "length" if last else None, ids)))
            k += 1
            if not last:
                time.sleep(ARGS.token_ms / 1000.0)
        if ARGS.mode == "normal" and req.get("stream_options", {}).get("include_usage"):
            self.event(chunk_json(dict(head, choices=[], usage={
                "prompt_tokens": n_prompt, "total_tokens": n_prompt + max_tokens,
                "completion_tokens": max_tokens})))
        self.event("[DONE]")
        self.send_chunk("")  # the last chunk: the body ends, the connection stays


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file")
    p.add_argument("--pid-file")
    p.add_argument("--mode", default="normal",
                   choices=["normal", "malformed", "error", "never-ready", "exit",
                            "removed-flag"])
    p.add_argument("--ttft-ms", type=float, default=20)
    p.add_argument("--token-ms", type=float, default=5)
    p.add_argument("--token-ids", action="store_true")
    p.add_argument("--chunk-tokens", type=int, default=1)
    p.add_argument("--child", action="store_true")
    p.add_argument("--weights", type=int, default=0)
    p.add_argument("--slots", type=int, default=64)
    p.add_argument("--ctx", type=int, default=65536)
    p.add_argument("--metrics", default="llamacpp",
                   choices=["llamacpp", "vllm", "vllm-cache", "vllm-cache-bad", "sglang-cache",
                            "none", "malformed"])
    p.add_argument("--kv-metric", action="store_true")
    p.add_argument("--slot-save-path")
    p.add_argument("--leak-cells", type=int, default=0)
    p.add_argument("--exit-after", type=float, default=0)
    p.add_argument("--model")
    ARGS = p.parse_args()
    global SLOTS
    SLOTS = threading.Semaphore(ARGS.slots)
    if ARGS.mode == "exit":
        sys.stderr.write("standin: CUDA error: no device found (told to exit)\n")
        sys.exit(3)
    if ARGS.mode == "removed-flag":  # argparse's words, on a usage line as long as vLLM's
        opts = " ".join("[--option-%03d OPTION_%03d]" % (i, i) for i in range(120))
        sys.stderr.write("usage: vllm serve [-h] %s [model_tag]\n" % opts)
        sys.stderr.write("vllm serve: error: unrecognized arguments: --disable-log-requests\n")
        sys.exit(2)
    if ARGS.child:
        subprocess.Popen(["sleep", "300"])
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    if ARGS.port_file:
        with open(ARGS.port_file + ".tmp", "w") as f:
            f.write(str(srv.server_address[1]))
        os.rename(ARGS.port_file + ".tmp", ARGS.port_file)
    if ARGS.pid_file:
        with open(ARGS.pid_file + ".tmp", "w") as f:
            f.write("%d %d" % (os.getpid(), os.getpgrp()))
        os.rename(ARGS.pid_file + ".tmp", ARGS.pid_file)
    sys.stderr.write("standin: listening on 127.0.0.1:%d\n" % srv.server_address[1])
    sys.stderr.flush()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        if ARGS.exit_after > 0:
            time.sleep(ARGS.exit_after)
            sys.stderr.write("standin: exiting after %g s (told to)\n" % ARGS.exit_after)
            sys.stderr.flush()
            os._exit(1)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
