// `shardcheck worker --fd N`: the child process behind a process replica. Internal: the runner
// starts it (serving/replica_proc.c) with a Unix socket on fd N; it is not meant to be run by
// hand. `shardcheck worker --connect PATH`: every rank of the MPI job behind a replica whose
// ranks are processes (router.isolation mpi); rank 0 connects to the runner's socket at PATH.
// This file only parses arguments; serving is replica_proc_serve and replica_mpi_serve.
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "serving/replica.h"
#include "serving/replica_mpi.h"

static void usage(FILE *f) {
  fprintf(f, "usage: shardcheck worker --fd N\n"
             "       shardcheck worker --connect SOCKET   (every rank of an MPI job)\n\n"
             "Internal: not meant to be run by hand. `shardcheck run` starts one worker per\n"
             "process replica and speaks to it over the Unix socket on fd N: the worker builds\n"
             "the replica's engine from the config it is sent, runs the requests it is sent\n"
             "and reports events and heartbeats back. It dies with the process that started\n"
             "it.\n\n"
             "  --fd N      the socket's file descriptor\n"
             "  --connect SOCKET\n"
             "              a replica whose ranks are the processes of an MPI job\n"
             "              (router.isolation: mpi): rank 0 connects to the runner's Unix\n"
             "              socket at SOCKET, every other rank serves rank 0's steps\n"
             "  -h, --help  this text\n\n"
             "exit codes: 0 the socket closed, 2 bad usage, 3 the engine could not be built or\n"
             "failed.\n");
}

int cmd_worker(int argc, char **argv) {
  static const struct option opts[] = {
      {"fd", required_argument, NULL, 'f'},
      {"connect", required_argument, NULL, 'c'},
      {"help", no_argument, NULL, 'h'},
      {0, 0, 0, 0}};
  int fd = -1;
  const char *connect_to = NULL;
  optind = 0; // glibc: start afresh
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    switch (c) {
    case 'h': usage(stdout); return CLI_OK;
    case 'f':
      if (!cli_parse_int(optarg, 0, 1 << 20, &fd))
        return cli_usage_error("worker", "--fd wants a descriptor number, not", optarg);
      break;
    case 'c': connect_to = optarg; break;
    case ':': return cli_usage_error("worker", "missing the value of", argv[optind - 1]);
    default: return cli_usage_error("worker", "unknown option", argv[optind - 1]);
    }
  }
  if (optind < argc) return cli_usage_error("worker", "unexpected argument", argv[optind]);
  if (connect_to && fd >= 0)
    return cli_usage_error("worker", "--fd and --connect exclude each other", NULL);
  if (connect_to) return replica_mpi_serve(connect_to);
  if (fd < 0) return cli_usage_error("worker", "--fd N or --connect SOCKET is required", NULL);
  if (fcntl(fd, F_GETFD) < 0) return cli_usage_error("worker", "--fd: no such descriptor", NULL);
  return replica_proc_serve(fd);
}
