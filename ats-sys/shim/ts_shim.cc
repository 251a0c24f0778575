// The C side of ats-sys, compiled by build.rs (the `cc` crate) against the
// installed Traffic Server headers, 9.x or 10.x.
//
// 1. On 10.x, `extern "C"` forwarders (`tsrs_<Name>`) for the TS functions of
//    forward.def: 10.x gave the TS API C++ linkage, and Rust binds to stable
//    C names rather than to Itanium-mangled ones. Each forwarder's types come
//    from the real declaration through decltype, so a signature change in a
//    later 10.x is a compile error here, not a silent ABI mismatch.
// 2. On both, the calls of ts_shim.h, whose form differs between versions.
//
// Exceptions: the forwarders stay plain tail calls (one `jmp`), so an
// exception thrown inside ATS passes through them; ats-sys declares the
// forwarded functions `extern "C-unwind"`, which makes that defined in Rust
// (the guard aborts, or fails safe as on a panic) rather than UB.
// The functions of ts_shim.h are noexcept: they end such an exception in
// std::terminate themselves.

#include <ts/ts.h>
#include <ts/remap.h>

#include <cstddef>
#include <tuple>
#include <type_traits>

#include "ts_shim.h"

#if TS_VERSION_MAJOR >= 10

namespace
{
// Return and parameter types of a function type.
template <typename F> struct Sig;
template <typename R, typename... A> struct Sig<R(A...)> {
  using Ret = R;
  template <std::size_t I> using Arg = std::tuple_element_t<I, std::tuple<A...>>;
  static constexpr std::size_t arity = sizeof...(A);
};
} // namespace

#define TSRS_RET(f)    Sig<decltype(f)>::Ret
#define TSRS_ARG(f, i) Sig<decltype(f)>::template Arg<i>
#define TSRS_ARITY(f, n) \
  static_assert(Sig<decltype(f)>::arity == (n), #f ": forward.def gives the wrong number of parameters")

#define TSRS_FORWARD_0(f)                                       \
  TSRS_ARITY(f, 0);                                            \
  extern "C" TSRS_RET(f) tsrs_##f() { return f(); }
#define TSRS_FORWARD_1(f)                                       \
  TSRS_ARITY(f, 1);                                            \
  extern "C" TSRS_RET(f) tsrs_##f(TSRS_ARG(f, 0) a0) { return f(a0); }
#define TSRS_FORWARD_2(f)                                                         \
  TSRS_ARITY(f, 2);                                                              \
  extern "C" TSRS_RET(f) tsrs_##f(TSRS_ARG(f, 0) a0, TSRS_ARG(f, 1) a1) \
  {                                                                               \
    return f(a0, a1);                                                             \
  }
#define TSRS_FORWARD_3(f)                                                                        \
  TSRS_ARITY(f, 3);                                                                             \
  extern "C" TSRS_RET(f) tsrs_##f(TSRS_ARG(f, 0) a0, TSRS_ARG(f, 1) a1, TSRS_ARG(f, 2) a2) \
  {                                                                                              \
    return f(a0, a1, a2);                                                                        \
  }
#define TSRS_FORWARD_4(f)                                                                                       \
  TSRS_ARITY(f, 4);                                                                                            \
  extern "C" TSRS_RET(f) tsrs_##f(TSRS_ARG(f, 0) a0, TSRS_ARG(f, 1) a1, TSRS_ARG(f, 2) a2, TSRS_ARG(f, 3) a3) \
  {                                                                                                             \
    return f(a0, a1, a2, a3);                                                                                   \
  }
#define TSRS_FORWARD_5(f)                                                                                      \
  TSRS_ARITY(f, 5);                                                                                           \
  extern "C" TSRS_RET(f)                                                                                       \
    tsrs_##f(TSRS_ARG(f, 0) a0, TSRS_ARG(f, 1) a1, TSRS_ARG(f, 2) a2, TSRS_ARG(f, 3) a3, TSRS_ARG(f, 4) a4) \
  {                                                                                                            \
    return f(a0, a1, a2, a3, a4);                                                                              \
  }
#define TSRS_FORWARD_6(f)                                                                                      \
  TSRS_ARITY(f, 6);                                                                                           \
  extern "C" TSRS_RET(f) tsrs_##f(TSRS_ARG(f, 0) a0, TSRS_ARG(f, 1) a1, TSRS_ARG(f, 2) a2, TSRS_ARG(f, 3) a3, \
                                  TSRS_ARG(f, 4) a4, TSRS_ARG(f, 5) a5)                                        \
  {                                                                                                            \
    return f(a0, a1, a2, a3, a4, a5);                                                                          \
  }

#define TSRS_FORWARD(n, f) TSRS_FORWARD_##n(f)
#include "forward.def"

// Debug output: one DbgCtl per tag, made once and never freed (DbgCtl
// objects are meant to be static; the plugin's tag lives for the process).
extern "C" const void *
tsrs_dbg_ctl(const char *tag) noexcept
{
  return new DbgCtl(tag);
}

extern "C" int
tsrs_dbg_on(const void *ctl) noexcept
{
  return static_cast<const DbgCtl *>(ctl)->on() ? 1 : 0;
}

extern "C" void
tsrs_dbg_print(const void *ctl, const char *msg) noexcept
{
  auto c = static_cast<const DbgCtl *>(ctl);
  // No source location: this file's would mislead, and 9.x's TSDebug has none.
  DbgCtl::print(c->tag(), nullptr, nullptr, 0, "%s", msg);
}

#else // 9.x: the C API as it is.

extern "C" const void *
tsrs_dbg_ctl(const char *tag) noexcept
{
  return tag;
}

extern "C" int
tsrs_dbg_on(const void *ctl) noexcept
{
  return TSIsDebugTagSet(static_cast<const char *>(ctl));
}

extern "C" void
tsrs_dbg_print(const void *ctl, const char *msg) noexcept
{
  TSDebug(static_cast<const char *>(ctl), "%s", msg);
}

#endif

extern "C" void
tsrs_note(const char *msg) noexcept
{
  TSNote("%s", msg);
}

extern "C" void
tsrs_warning(const char *msg) noexcept
{
  TSWarning("%s", msg);
}

extern "C" void
tsrs_error(const char *msg) noexcept
{
  TSError("%s", msg);
}

extern "C" void
tsrs_fatal(const char *msg) noexcept
{
  TSFatal("%s", msg);
}

extern "C" TSReturnCode
tsrs_text_log_write(TSTextLogObject obj, const char *line) noexcept
{
  return TSTextLogObjectWrite(obj, "%s", line);
}
