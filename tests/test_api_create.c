/* test_api_create.c: the runtime's life cycle through the public API: the version
 * string, fi_options and its struct_size, fi_runtime_create / destroy, and a
 * size query that needs a device argument. */
#include <ctype.h>
#include <stddef.h>

#include "test_api_util.h"

FT_TEST(version_is_major_minor_patch) {
  const char *v = fi_version();
  FT_REQUIRE(v != NULL && v[0], "empty version");
  const char *p = v;
  for (int part = 0; part < 3; part++) {
    FT_REQUIRE(isdigit((unsigned char)*p), "'%s': part %d is not a number", v, part);
    while (isdigit((unsigned char)*p)) p++;
    if (part < 2) {
      FT_REQUIRE(*p == '.', "'%s': no '.' after part %d", v, part);
      p++;
    }
  }
  FT_CHECK(*p == 0, "'%s': trailing text", v);
  FT_CHECK_EQ_STR(v, FI_VERSION_STRING, "the build's version");
}

FT_TEST(options_init_defaults) {
  fi_options o;
  memset(&o, 0xab, sizeof o);
  fi_options_init(&o);
  FT_CHECK_EQ_INT(o.struct_size, sizeof(fi_options));
  FT_CHECK_EQ_INT(o.log_level, -1);
  FT_CHECK(o.cache_path == NULL, "cache_path not NULL");
  FT_CHECK(o.system_cache_path == NULL, "system_cache_path not NULL");
  fi_options_init(NULL); /* harmless */
}

FT_TEST(runtime_create_and_destroy) {
  fi_runtime *rt = (fi_runtime *)0x1;
  fi_status st = fi_runtime_create(NULL, &rt);
  REQUIRE_ST(st, FI_OK, "create(NULL opts): %s", fi_last_error());
  FT_CHECK(rt != NULL && rt != (fi_runtime *)0x1);
  fi_runtime_destroy(rt);
  fi_runtime_destroy(NULL); /* harmless */

  poison_error();
  CHECK_ST(fi_runtime_create(NULL, NULL), FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_STR_HAS(fi_last_error(), "out");

  fi_options o;
  const size_t bad[] = {0, sizeof(fi_options) + 1, sizeof(fi_options) * 100, (size_t)-1};
  for (int i = 0; i < 4; i++) {
    fi_options_init(&o);
    o.struct_size = bad[i];
    rt = (fi_runtime *)0x1;
    poison_error();
    st = fi_runtime_create(&o, &rt);
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "struct_size %zu", bad[i]);
    FT_CHECK_STR_HAS(fi_last_error(), "struct_size", "struct_size %zu", bad[i]);
    FT_CHECK(rt == NULL, "struct_size %zu: *out not cleared", bad[i]);
    if (st == FI_OK) fi_runtime_destroy(rt);
  }

  /* An older caller's smaller struct: the fields it has are read, later ones default. */
  fi_options_init(&o);
  o.cache_path = ":memory:";
  o.system_cache_path = "/nonexistent/should/not/be/read";
  o.log_level = 4;
  o.struct_size = offsetof(fi_options, system_cache_path);
  st = fi_runtime_create(&o, &rt);
  REQUIRE_ST(st, FI_OK, "old struct_size: %s", fi_last_error());
  FT_CHECK_EQ_STR(rt->cache_path, ":memory:");
  FT_CHECK(rt->log_level != 4, "log_level read beyond struct_size");
  fi_runtime_destroy(rt);

  /* An explicit level is used as given. */
  fi_options_init(&o);
  o.cache_path = ":memory:";
  o.log_level = 3;
  REQUIRE_ST(fi_runtime_create(&o, &rt), FI_OK, "%s", fi_last_error());
  FT_CHECK_EQ_INT(rt->log_level, 3);
  fi_runtime_destroy(rt);
}

/* fi_batch_decode_workspace_size on a CPU device is a bad argument (not "no device", nor a
 * size), and fi_runtime_create takes only an options struct_size it knows. */
FT_TEST(workspace_size_cpu_device_and_options_struct_size) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL, "%s", fi_last_error());
  static const DLDeviceType bad[] = {kDLCPU, kDLCUDAHost, kDLCUDAManaged, kDLVulkan};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t bytes = 12345;
    DLDevice dev = {bad[i], 0};
    fi_status st = fi_batch_decode_workspace_size(rt, dev, 8, 32, 8, 128, &bytes);
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "device type %d: %s", (int)bad[i], fi_last_error());
    FT_CHECK_STR_HAS(fi_last_error(), "device", "device type %d", (int)bad[i]);
    FT_CHECK_EQ_INT(bytes, 12345, "device type %d: bytes written on failure", (int)bad[i]);
  }
  DLDevice gpu = {kDLCUDA, 0};
  size_t bytes = 0;
  fi_status st = fi_batch_decode_workspace_size(rt, gpu, 8, 32, 8, 128, &bytes);
  FT_CHECK(st == FI_ERR_NO_DEVICE || (st == FI_OK && bytes > 0), "a CUDA device: %s", fi_last_error());
  fi_runtime_destroy(rt);

  /* (runtime_create_and_destroy checks 0 and sizes above fi_options'; a size that ends
   * where a field starts is an older caller's, taken there) */
  static const size_t sizes[] = {1, 3, sizeof(size_t), offsetof(fi_options, system_cache_path) + 1,
                                 offsetof(fi_options, log_level) + 4, sizeof(fi_options) - 1};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    fi_options bad_o;
    fi_options_init(&bad_o);
    bad_o.cache_path = ":memory:";
    bad_o.struct_size = sizes[i];
    rt = (fi_runtime *)0x1;
    st = fi_runtime_create(&bad_o, &rt);
    CHECK_ST(st, FI_ERR_INVALID_ARGUMENT, "struct_size %zu: %s", sizes[i], fi_last_error());
    FT_CHECK(rt == NULL, "struct_size %zu: *out not cleared", sizes[i]);
    FT_CHECK_STR_HAS(fi_last_error(), "struct_size", "struct_size %zu", sizes[i]);
    if (st == FI_OK) fi_runtime_destroy(rt);
  }
  fi_options good;
  fi_options_init(&good);
  good.cache_path = ":memory:";
  good.log_level = 0;
  CHECK_ST(fi_runtime_create(&good, &rt), FI_OK, "%s", fi_last_error());
  fi_runtime_destroy(rt);
}
