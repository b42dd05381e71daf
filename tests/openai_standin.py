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
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None


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

    def do_GET(self):
        if self.path == "/health" and ARGS.mode != "never-ready":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(503 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
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
            self.event(chunk_json(choice(" tok" * m, "length" if last else None, ids)))
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
    ARGS = p.parse_args()
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
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
