/* jit_render.c: source rendering. The templates stay separate headers handed to
 * the compiler in memory, so the rendered unit is short and readable in fi-cache show. */
#include "jit_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit_templates.h"

int jit_render(const jit_key *key, const char *entry, char **out, char *err, size_t errlen) {
  *out = NULL;
  char canon[1024];
  if (jit_key_canonical(key, canon, sizeof canon) < 0) {
    snprintf(err, errlen, "render: key of op %s cannot be written", key->op->name);
    return -1;
  }
  if (!jit_template_find(key->op->template_name)) {
    snprintf(err, errlen, "render: template %s is not embedded", key->op->template_name);
    return -1;
  }
  char body[8192];
  int nb = key->op->render_entry(key, entry, body, sizeof body);
  if (nb < 0) {
    snprintf(err, errlen, "render: entry for %s does not fit", canon);
    return -1;
  }
  size_t cap = strlen(canon) + strlen(key->op->template_name) + (size_t)nb + 256;
  char *s = malloc(cap);
  if (!s) {
    snprintf(err, errlen, "render: out of memory");
    return -1;
  }
  snprintf(s, cap,
           "// fi_runtime kernel: %s\n"
           "#include \"fi_port.cuh\"\n"
           "#include \"%s\"\n\n%s",
           canon, key->op->template_name, body);
  *out = s;
  return 0;
}
