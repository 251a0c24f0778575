/*
 * The few calls whose form differs between Traffic Server 9 and 10, as C
 * functions with one signature for both (ts_shim.cc implements them).
 *
 * 9.x: the TS API is C; diagnostics go through variadic TSDebug/TSError.
 * 10.x: the TS API has C++ linkage, debug output needs the C++ DbgCtl class,
 * and a variadic call cannot be forwarded. So every text goes through here
 * as one finished C string, never as a format.
 */
#ifndef ATS_RS_TS_SHIM_H
#define ATS_RS_TS_SHIM_H

#include <ts/apidefs.h>

#ifdef __cplusplus
/* No C++ exception may unwind into the Rust caller. */
#define TSRS_NOEXCEPT noexcept
extern "C" {
#else
#define TSRS_NOEXCEPT
#endif

/* diags.log at NOTE, WARNING and ERROR level (TSNote/TSWarning/TSError "%s"). */
void tsrs_note(const char *msg) TSRS_NOEXCEPT;
void tsrs_warning(const char *msg) TSRS_NOEXCEPT;
void tsrs_error(const char *msg) TSRS_NOEXCEPT;
/* TSFatal("%s"): logs and stops traffic_server (a plugin.config plugin that cannot start). */
void tsrs_fatal(const char *msg) TSRS_NOEXCEPT;

/*
 * A debug control for `tag`, made once and kept for the life of the process
 * (9.x: the tag itself; 10.x: a DbgCtl, which must outlive every use).
 */
const void *tsrs_dbg_ctl(const char *tag) TSRS_NOEXCEPT;
/* Nonzero if debug output is on for the control's tag. */
int tsrs_dbg_on(const void *ctl) TSRS_NOEXCEPT;
/* Writes `msg` under the control's tag (callers check tsrs_dbg_on first). */
void tsrs_dbg_print(const void *ctl, const char *msg) TSRS_NOEXCEPT;

/* TSTextLogObjectWrite(obj, "%s", line). */
TSReturnCode tsrs_text_log_write(TSTextLogObject obj, const char *line) TSRS_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif
