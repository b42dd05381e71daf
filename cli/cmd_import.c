// `shardcheck import TRACE --db FILE`: a published per-request trace becomes a stored run
// (docs/calibration.md). The formats and what is assumed are reports/import.h's; this file
// parses arguments and prints.
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "reports/import.h"
#include "reports/store.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck import TRACE [--db PATH] [--name NAME] [--model NAME]\n"
          "                         [--tp N] [--pp N] [--dp N]\n"
          "                         [--batch-size B --input-len I --output-len O]\n\n"
          "Stores a published per-request trace as one complete run, to report, gate and\n"
          "calibrate against (shardcheck calibrate) like a run of shardcheck's own.\n"
          "Formats, detected from the content:\n"
          "  LLMServingSim vLLM traces (vllm/requests.jsonl): one JSON object per line with\n"
          "    input_toks, output_toks, queued_ts, first_token_ts, last_token_ts (arrival =\n"
          "    queued_ts; tokens between the first and the last stored evenly spaced)\n"
          "  vllm bench serve --save-result --save-detailed (one JSON object): input_lens,\n"
          "    output_lens, ttfts, itls, request_rate; no arrival times in the file: with\n"
          "    request_rate inf all arrive at 0, else request i at i / request_rate (printed)\n"
          "  vLLM's benchmark_latency.py --output-json (one JSON object with avg_latency): one\n"
          "    batch's seconds; --batch-size, --input-len and --output-len say the batch. Every\n"
          "    request arrives at 0 and finishes at avg_latency; its first token is not\n"
          "    measured, so calibrate fits the run's E2E\n\n"
          "  -d, --db PATH     the results database (default results.db)\n"
          "      --name NAME   the run's scenario name (default import:BASENAME)\n"
          "      --model NAME  the model recorded (default: the trace's, or unknown)\n"
          "      --tp N, --pp N, --dp N  the layout the trace was measured at (stored as the\n"
          "                    run's deployment; calibrate replays the run at it)\n"
          "      --batch-size B, --input-len I, --output-len O  a latency benchmark's batch\n"
          "  -h, --help        this text\n\n"
          "Prints the new run's id. exit codes: 0 ok, 2 a malformed trace (FILE:LINE: key\n"
          "'FIELD': ...; nothing is stored) or bad usage, 3 runtime failure.\n");
}

int cmd_import(int argc, char **argv) {
  const char *db_path = "results.db", *name = NULL, *model = NULL;
  import_options io = {0};
  static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                       {"name", required_argument, 0, 'N'},
                                       {"model", required_argument, 0, 'm'},
                                       {"tp", required_argument, 0, 'T'},
                                       {"pp", required_argument, 0, 'P'},
                                       {"dp", required_argument, 0, 'D'},
                                       {"batch-size", required_argument, 0, 'B'},
                                       {"input-len", required_argument, 0, 'I'},
                                       {"output-len", required_argument, 0, 'O'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "d:h", opts, NULL)) != -1) {
    switch (c) {
    case 'd': db_path = optarg; break;
    case 'N': name = optarg; break;
    case 'm': model = optarg; break;
    case 'T':
    case 'P':
    case 'D':
    case 'B':
    case 'I':
    case 'O': {
      int *dst = c == 'T' ? &io.tp : c == 'P' ? &io.pp : c == 'D' ? &io.dp
               : c == 'B' ? &io.batch : c == 'I' ? &io.input_len : &io.output_len;
      if (!cli_parse_int(optarg, 1, c == 'T' || c == 'P' || c == 'D' ? 64 : 10000000, dst))
        return cli_usage_error("import", "expected a positive integer", optarg);
      break;
    }
    case 'h': usage(stdout); return CLI_OK;
    default: return cli_usage_error("import", "unknown option", argv[optind - 1]);
    }
  }
  if (optind != argc - 1) return cli_usage_error("import", "expected one TRACE file", NULL);
  const char *trace = argv[optind];
  sc_error err = {0};
  store *db = NULL;
  sc_status s = store_open(db_path, &db, &err);
  if (s != SC_OK) return cli_fail("import", s, &err);
  import_result r;
  s = import_trace(db, trace, name, model, &io, &r, &err);
  store_close(db);
  if (s != SC_OK) return cli_fail("import", s, &err);
  printf("imported %s (%s): %d requests as run %lld in %s\n", trace, r.format, r.requests,
         (long long)r.run_id, db_path);
  if (r.assumed[0]) printf("assumed: %s\n", r.assumed);
  return CLI_OK;
}
