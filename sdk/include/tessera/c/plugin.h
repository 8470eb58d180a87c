/*
 * Tessera plugin ABI: the descriptor every plugin library exports.
 *
 * Each plugin `.so` is named `libtessera_<kind>_<name>.so` and exports exactly
 * one symbol, TESSERA_PLUGIN_ENTRY_SYMBOL, a function returning a pointer to a
 * static, immutable descriptor. The host reads the descriptor before it calls
 * anything else; the first three fields (struct_size, abi_major, abi_minor)
 * keep their layout in every ABI version so that any host can read them and
 * refuse a plugin it cannot use.
 */
#ifndef TESSERA_C_PLUGIN_H
#define TESSERA_C_PLUGIN_H

#include "tessera/c/common.h"
#include "tessera/c/host.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The exported entry point, as a string for symbol lookup. */
#define TESSERA_PLUGIN_ENTRY_SYMBOL "tessera_plugin_entry"

/* One option a plugin accepts in its TOML sub-table. */
typedef struct tessera_option_decl {
  const char* key;           /* TOML key, [a-z0-9_]+                           */
  tessera_option_type type;  /* TESSERA_OPT_*                                  */
  const char* default_value; /* TOML literal text: "true", "25", "0.5", "ring" */
  const char* help;          /* one line shown by `tessera plugins --describe` */
} tessera_option_decl;

typedef struct tessera_plugin_descriptor {
  /* ---- frozen header: never changes across ABI versions ---- */
  uint32_t struct_size; /* sizeof(tessera_plugin_descriptor) the plugin was built with */
  uint16_t abi_major;   /* TESSERA_ABI_MAJOR the plugin was built with                 */
  uint16_t abi_minor;   /* TESSERA_ABI_MINOR the plugin was built with                 */
  /* ---- ABI 1.0 ---- */
  tessera_plugin_kind kind; /* TESSERA_KIND_*; must agree with the file name */
  /* ---- ABI 1.3 (these 4 bytes were `uint32_t reserved0`, zero) ---- */
  /* Version of the interface table `api` points to, e.g.
   * TESSERA_BACKEND_API_MAJOR / _MINOR for a backend. A host reads a
   * descriptor of ABI 1.0-1.2 as interface 1.<abi_minor> of its kind. */
  uint16_t api_major;
  uint16_t api_minor;
  /* ---- ABI 1.0 ---- */
  const char* name;                   /* [a-z0-9_]+; must agree with the file name         */
  const char* version;                /* the plugin's own version, e.g. "1.2.0"            */
  const char* summary;                /* one line for `tessera plugins`                    */
  const tessera_option_decl* options; /* declared options, may be NULL if none   */
  uint32_t num_options;               /* entries in `options`                    */
  uint32_t reserved1;                 /* zero                                    */
  /* Interface table of the kind, e.g. `const tessera_backend_api*` for a
   * backend, of version api_major.api_minor. The table begins with its own
   * struct_size. */
  const void* api;
} tessera_plugin_descriptor;

/* Signature of the entry point. Must not allocate, start threads or fail:
 * the host calls it only to read the descriptor. */
typedef const tessera_plugin_descriptor* (*tessera_plugin_entry_fn)(void);

/* Smallest descriptor the host of this ABI major accepts. */
#define TESSERA_PLUGIN_DESCRIPTOR_MIN_SIZE \
  (offsetof(tessera_plugin_descriptor, api) + sizeof(const void*))

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_C_PLUGIN_H */
