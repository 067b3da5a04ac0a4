#ifndef C_GLIBC_EXTRAS_H
#define C_GLIBC_EXTRAS_H

#include <spawn.h>

/// glibc functions whose headers Swift's Glibc module leaves out (malloc.h) or declares only under
/// _GNU_SOURCE (spawn.h's close-from), through their documented C API. Each returns what the glibc
/// call returns; without glibc they do nothing and return 0 (close-from: ENOSYS).
int cge_limit_malloc_arenas(int count);
int cge_release_free_memory(void);
int cge_spawn_close_from(posix_spawn_file_actions_t *actions, int from);

#endif
