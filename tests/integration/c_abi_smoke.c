/* SPDX-License-Identifier: Apache-2.0 */
/* A rank written in plain C against libgradsync.so: proves the header is C
 * and the shared library's exported ABI is enough for a real allreduce. */
#include <stddef.h>
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
  /* A caller built against the 0.1 header has a shorter gradsync_op_t (it
   * ends before `device`): initialising and using it never touches the
   * bytes past its end, and it runs as a CPU operation. */
  const size_t old_size = offsetof(gradsync_op_t, device);
  unsigned char storage[sizeof(gradsync_op_t) + 16];
  memset(storage, 0xAB, sizeof(storage));
  gradsync_op_t* old_op = (gradsync_op_t*)storage;
  if (gradsync_op_init_sized(old_op, (uint32_t)old_size) != GRADSYNC_OK || old_op->struct_size != old_size) {
    fprintf(stderr, "sized init failed\n");
    return 1;
  }
  for (size_t i = old_size; i < sizeof(storage); ++i) {
    if (storage[i] != 0xAB) {
      fprintf(stderr, "init of a 0.1-sized op wrote byte %zu past its end\n", i);
      return 1;
    }
  }
  old_op->name = "c.old_abi";
  old_op->dtype = GRADSYNC_FLOAT64;
  old_op->ndim = 1;
  old_op->shape = shape;
  old_op->data = data;
  rc = gradsync_enqueue(client, old_op, &handle);
  if (rc == GRADSYNC_OK) rc = gradsync_wait(client, handle, 30.0);
  if (rc != GRADSYNC_OK) {
    fprintf(stderr, "allreduce with a 0.1-sized op: %d %s\n", rc, gradsync_last_error());
    return 1;
  }
  gradsync_release(client, handle);
  gradsync_free(client, data);
  gradsync_shutdown(client);
  printf("rank %d: C ABI allreduce OK (libgradsync %s)\n", rank, gradsync_version());
  return 0;
}
