/* SPDX-License-Identifier: Apache-2.0 */
/* A rank written in plain C against libgradsync.so: proves the header is C
 * and the shared library's exported ABI is enough for a real allreduce. */
#include <stdio.h>
#include <string.h>

#include "gradsync/gradsync.h"

int main(void) {
  gradsync_config_t config;
  gradsync_client_t* client = NULL;
  gradsync_config_init(&config);
  if (gradsync_init(&config, &client) != GRADSYNC_OK) {
    fprintf(stderr, "init: %s\n", gradsync_last_error());
    return 1;
  }
  const int rank = gradsync_rank(client), size = gradsync_size(client);
  double* data = (double*)gradsync_alloc(client, 8 * sizeof(double));
  for (int i = 0; i < 8; ++i) data[i] = rank + i;
  const int64_t shape[1] = {8};
  gradsync_op_t op;
  gradsync_op_init(&op);
  op.name = "c.allreduce";
  op.dtype = GRADSYNC_FLOAT64;
  op.ndim = 1;
  op.shape = shape;
  op.data = data;
  op.reduce_op = GRADSYNC_SUM;
  gradsync_handle_t handle;
  int rc = gradsync_enqueue(client, &op, &handle);
  if (rc == GRADSYNC_OK) rc = gradsync_wait(client, handle, 30.0);
  if (rc != GRADSYNC_OK) {
    fprintf(stderr, "allreduce: %d %s\n", rc, gradsync_last_error());
    return 1;
  }
  gradsync_release(client, handle);
  for (int i = 0; i < 8; ++i) {
    const double want = size * (size - 1) / 2.0 + size * i;
    if (data[i] != want) {
      fprintf(stderr, "element %d = %g, want %g\n", i, data[i], want);
      return 1;
    }
  }
  /* Errors come back as codes with text. */
  op.dtype = 99;
  if (gradsync_enqueue(client, &op, &handle) != GRADSYNC_INVALID_ARGUMENT || strlen(gradsync_last_error()) == 0) {
    fprintf(stderr, "bad dtype not reported\n");
    return 1;
  }
  gradsync_free(client, data);
  gradsync_shutdown(client);
  printf("rank %d: C ABI allreduce OK (libgradsync %s)\n", rank, gradsync_version());
  return 0;
}
