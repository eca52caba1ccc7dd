# SPDX-License-Identifier: Apache-2.0
"""One rank of a c10d test, started by torchrun: runs scenario $1 of
scenarios.py on backend $2 and saves what it returns to $3/<rank>.pt."""
import faulthandler
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenarios  # noqa: E402

if not os.environ.get("C10D_TEST_ENTRY_POINT"):  # else torch finds it through the entry point
    import gradsync.torch.distributed  # noqa: E402,F401 (registers the backend)


def main():
    # A hung test shows where every thread of the rank was, then ends.
    faulthandler.dump_traceback_later(float(os.environ.get("C10D_TEST_HANG_SECONDS", "150")), exit=True)
    scenario, backend, out_dir = sys.argv[1:4]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    start = time.monotonic()
    try:
        if scenario not in scenarios.SELF_INIT:
            dist.init_process_group(backend, timeout=scenarios.TIMEOUT)
    except RuntimeError as error:  # a named error at init is an answer too (the test decides)
        torch.save({"error": str(error), "seconds": time.monotonic() - start, "at": "init"},
                   os.path.join(out_dir, "%s.pt" % os.environ["RANK"]))
        raise
    result = getattr(scenarios, scenario)(backend)
    torch.save(result, os.path.join(out_dir, "%s.pt" % os.environ["RANK"]))
    if backend == "gloo":
        # The reference: Gloo aborts now and then in its teardown on this
        # machine (std::terminate, 1 run in ~20), after the results are saved.
        sys.stdout.flush()
        os._exit(0)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
