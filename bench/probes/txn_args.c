/* What one per-transaction argument call costs in ATS 9.2, for both APIs:
 * a remap plugin that per request sets, reads 3 times and clears one
 * argument (the 5 calls our rate_limit.so makes), with TSHttpTxnArg*
 * (first pparam "old"; deprecated, gone in 10.x) or TSUserArg* ("new").
 *
 *   gcc -O2 -shared -fPIC -o /tmp/txn_args.so bench/probes/txn_args.c
 *   cargo run --release -p ats-bench -- icount --reps 1 --only old,new \
 *     --plugin 'old=/tmp/txn_args.so old' --plugin 'new=/tmp/txn_args.so new'
 *
 * Measured (BENCHMARKS.md): TSHttpTxnArgGet/Set 20 instructions a call,
 * TSUserArgGet 536, TSUserArgSet 542 (a __dynamic_cast inside ATS). */
#include <ts/ts.h>
#include <ts/remap.h>
#include <string.h>
static int old_idx = -1, new_idx = -1;
TSReturnCode TSRemapInit(TSRemapInterface *api, char *errbuf, int size) { return TS_SUCCESS; }
TSReturnCode TSRemapNewInstance(int argc, char *argv[], void **ih, char *errbuf, int size) {
  if (old_idx < 0) TSHttpTxnArgIndexReserve("argprobe", "", &old_idx);
  if (new_idx < 0) TSUserArgIndexReserve(TS_USER_ARGS_TXN, "argprobe", "", &new_idx);
  *ih = (void *)(long)(argc > 2 && strcmp(argv[2], "old") == 0 ? 1 : 2);
  return TS_SUCCESS;
}
void TSRemapDeleteInstance(void *ih) {}
static int sink;
TSRemapStatus TSRemapDoRemap(void *ih, TSHttpTxn txn, TSRemapRequestInfo *rri) {
  if ((long)ih == 1) {
    TSHttpTxnArgSet(txn, old_idx, &sink);
    for (int i = 0; i < 3; i++) sink += TSHttpTxnArgGet(txn, old_idx) != NULL;
    TSHttpTxnArgSet(txn, old_idx, NULL);
  } else {
    TSUserArgSet(txn, new_idx, &sink);
    for (int i = 0; i < 3; i++) sink += TSUserArgGet(txn, new_idx) != NULL;
    TSUserArgSet(txn, new_idx, NULL);
  }
  return TSREMAP_NO_REMAP;
}
