/* The floor (issue 32): the least a remap concurrency limiter must do, as
 * a plugin, for the instruction counts of `ci/bench.sh icount`. One relaxed
 * atomic add at remap, a TXN_CLOSE hook, one atomic sub and a re-enable at
 * close; nothing else. It never compares the count with a limit: a real
 * limiter's compare and branch are a few instructions, and the floor must
 * not flatter itself with work it skips.
 *
 * Plain C for 9.2's C headers; compiled as C++17 for 10.x, whose headers are
 * C++ (bench/build.rs). The GCC atomic builtins are the same in both. */
#include <ts/ts.h>
#include <ts/remap.h>

static TSCont close_cont;
static long in_flight;

static int
on_close(TSCont contp, TSEvent event, void *edata)
{
  (void)contp;
  (void)event;
  __atomic_fetch_sub(&in_flight, 1, __ATOMIC_RELAXED);
  TSHttpTxnReenable((TSHttpTxn)edata, TS_EVENT_HTTP_CONTINUE);
  return 0;
}

TSReturnCode
TSRemapInit(TSRemapInterface *api, char *errbuf, int errbuf_size)
{
  (void)api;
  (void)errbuf;
  (void)errbuf_size;
  close_cont = TSContCreate(on_close, NULL);
  return close_cont ? TS_SUCCESS : TS_ERROR;
}

TSReturnCode
TSRemapNewInstance(int argc, char *argv[], void **ih, char *errbuf, int errbuf_size)
{
  (void)argc;
  (void)argv;
  (void)errbuf;
  (void)errbuf_size;
  *ih = NULL;
  return TS_SUCCESS;
}

void
TSRemapDeleteInstance(void *ih)
{
  (void)ih;
}

TSRemapStatus
TSRemapDoRemap(void *ih, TSHttpTxn txn, TSRemapRequestInfo *rri)
{
  (void)ih;
  (void)rri;
  __atomic_fetch_add(&in_flight, 1, __ATOMIC_RELAXED);
  TSHttpTxnHookAdd(txn, TS_HTTP_TXN_CLOSE_HOOK, close_cont);
  return TSREMAP_NO_REMAP;
}
