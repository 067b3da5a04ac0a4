#define _GNU_SOURCE
#include "CGlibcExtras.h"
#include <errno.h>

#if defined(__GLIBC__)
#include <malloc.h>

int cge_limit_malloc_arenas(int count) { return mallopt(M_ARENA_MAX, count); }
int cge_release_free_memory(void) { return malloc_trim(0); }
/// glibc 2.34+.
int cge_spawn_close_from(posix_spawn_file_actions_t *actions, int from) { return posix_spawn_file_actions_addclosefrom_np(actions, from); }
#else
int cge_limit_malloc_arenas(int count) { (void)count; return 0; }
int cge_release_free_memory(void) { return 0; }
int cge_spawn_close_from(posix_spawn_file_actions_t *actions, int from) { (void)actions; (void)from; return ENOSYS; }
#endif
