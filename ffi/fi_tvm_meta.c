/* fi_tvm_meta.c: the library's own exports: version, last_error, list_functions (every
 * export's name, from fi_tvm_list.h). */
#include <string.h>

#include "fi_tvm.h"

FT_EXPORT(version) { return ft_ret_str(c->rv, fi_version()); }

FT_EXPORT(last_error) { return ft_ret_str(c->rv, fi_last_error()); }

#define FT_NAME(name, sig) #name,
static const char *const export_names[] = {FT_EXPORTS(FT_NAME)};
#undef FT_NAME
enum { N_EXPORTS = sizeof export_names / sizeof export_names[0] };

/* An ffi.Array of str, made by the global function "ffi.Array" (the C ABI has no array
 * constructor of its own). */
FT_EXPORT(list_functions) {
  static const TVMFFIByteArray ctor = {"ffi.Array", 9};
  TVMFFIObjectHandle f = NULL;
  if (TVMFFIFunctionGetGlobal(&ctor, &f) != 0) return -1;
  if (!f) return ft_fail(c, -1, "RuntimeError", "tvm-ffi has no global function ffi.Array");
  TVMFFIAny items[N_EXPORTS];
  for (int i = 0; i < N_EXPORTS; i++) {
    items[i].type_index = kTVMFFIRawStr;
    items[i].zero_padding = 0;
    items[i].v_c_str = export_names[i];
  }
  int rc = TVMFFIFunctionCall(f, items, N_EXPORTS, c->rv);
  TVMFFIObjectDecRef(f);
  return rc;
}
