// Registration of the in-memory backend plugin.
#include "backend.hpp"
#include "settings.hpp"
#include "tessera/sdk/backend.hpp"

TESSERA_REGISTER_BACKEND(tessera::inmemory::InMemoryBackend, "inmemory", "1.0.0",
                         "ranks are threads of one process; collectives copy directly between "
                         "their buffers",
                         TESSERA_BACKEND_CAP_THREAD_RANKS | TESSERA_BACKEND_CAP_CPU_BUFFERS,
                         tessera::inmemory::kOptions)
