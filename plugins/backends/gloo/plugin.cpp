// Registration of the gloo backend plugin.
#include "backend.hpp"
#include "settings.hpp"
#include "tessera/sdk/backend.hpp"

TESSERA_REGISTER_BACKEND(tessera::gloo_backend::GlooBackend, "gloo", "1.0.0",
                         "one process per rank over gloo's TCP transport; rendezvous through a "
                         "TCP, file or Redis store",
                         TESSERA_BACKEND_CAP_CPU_BUFFERS, tessera::gloo_backend::kOptions)
