// The client of shardcheck serve's admin API: faults inside an engine POSTed to its
// /admin/faults (docs/serve.md, "Admin API"). serving/replica_http.c uses it for an HTTP
// replica whose server is shardcheck serve (docs/design.md, "Seams").
#pragma once

#include "serving/replica.h"
#include "kernels/status.h"

// Fault f as the JSON body of POST /admin/faults: one item of a scenario's faults: list aimed at
// replica0 (the server runs one replica per launch), or replica0.rank<R> for a rank. Returns
// the text (the caller frees it), or NULL for a kind the admin API does not take (kill, hang,
// resume, ...: signals to the launched server) and when out of memory.
char *admin_client_fault_body(const replica_fault *f);

// POSTs body to url with "Authorization: Bearer <token>" and waits for the answer, 5 s at most,
// on the calling thread. SC_OK on 200; SC_ABORTED on 409 and SC_INVALID on another status, err
// holding the start of the server's answer; SC_IO when there was no answer; SC_OOM.
sc_status admin_client_post(const char *url, const char *token, const char *body, sc_error *err);
