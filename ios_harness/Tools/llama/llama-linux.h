// The headers of the pinned llama.cpp, found on the include path that Package.swift adds from
// HARNESS_LLAMA (`make llama` links them from the llamacpp runtime environment's own build).
#include <llama.h>
#include <gguf.h>
